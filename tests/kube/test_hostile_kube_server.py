"""An API server that answers lists wrongly (a bug, a proxy in between, an aggregated API):
muster's list fails with a temporary error saying what was wrong, so the watch lists again
later, instead of looping for ever or crashing the service on a decode error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from muster.cluster.errors import ClusterError
from muster.cluster.kube import KubeBackend
from muster.cluster.kube.transport import Response, Transport

pytestmark = pytest.mark.timeout(30)
PODS = "/api/v1/pods"


class ScriptedLists(Transport):
    """The backend's transport, whose list answers are `pages`, the last one again and again."""

    def __init__(self, inner: Transport, pages: Sequence[bytes]) -> None:
        super().__init__(inner.api, writes=inner.writes, owns_client=False)
        self.pages = list(pages)
        self.asked = 0

    async def request(self, method: str, path: str, **kw: Any) -> Response:
        body = self.pages[min(self.asked, len(self.pages) - 1)]
        self.asked += 1
        return Response(status=200, body=body)


def page(names: Sequence[str], *, rv: str = "7", token: str = "") -> bytes:
    items = [{"metadata": {"name": n, "namespace": "default"}} for n in names]
    meta = {"resourceVersion": rv, **({"continue": token} if token else {})}
    return msgspec.json.encode({"kind": "PodList", "metadata": meta, "items": items})


async def test_a_continue_token_given_again_ends_the_list_with_a_temporary_error(
    backend: KubeBackend,
) -> None:
    looping = ScriptedLists(backend.transport, [page(["a"], token="t1"), page(["b"], token="t1")])
    with pytest.raises(ClusterError) as failed:
        await looping.list_all(PODS, obj="PodList", page_size=1)
    assert failed.value.temporary
    assert "continue token 't1' twice in one list (after 2 items)" in str(failed.value)
    assert looping.asked == 2


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"<html>502 Bad Gateway</html>", "the API server's list is not one"),
        (page(["a"], rv="not-a-number"), "the API server's list is not one"),
    ],
)
async def test_an_answer_that_is_no_list_is_a_temporary_error(
    backend: KubeBackend, body: bytes, words: str
) -> None:
    with pytest.raises(ClusterError) as failed:
        await ScriptedLists(backend.transport, [body]).list_all(PODS, obj="PodList")
    assert failed.value.temporary
    assert words in str(failed.value)


async def test_pages_that_end_are_one_list(backend: KubeBackend) -> None:
    pages = [page(["a"], token="t1"), page(["b"], rv="9", token="t2"), page(["c"])]
    items, rv = await ScriptedLists(backend.transport, pages).list_all(PODS, obj="PodList")
    assert [i["metadata"]["name"] for i in items] == ["a", "b", "c"]
    assert rv == 7  # the first page's: the list is one snapshot
