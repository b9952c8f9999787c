"""Gang-permit's cluster cache on the Kubernetes backend, against the API-server stand-in: its
watch away while a bound pod is deleted and the history compacted, so resuming gets 410 Gone.
The resumed watch ends expired, the cache lists again and drops the pod. Before, the resumed
watch listed again inside the backend, which had never shown that pod: no deletion came, and
the ghost held its room until restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

import pytest
from away_watch import AwayWatch, running_cache
from budget import wait_s
from kube_backend_helpers import ChangeLog, node, pod

from muster.cluster.backend import ClusterChange
from muster.cluster.errors import ExpiredError
from muster.cluster.kube import KubeBackend
from muster.devtools.apiserver import ApiServer

pytestmark = pytest.mark.timeout(60)

GHOST = "default/ghost"
CPU = {"resources": {"requests": {"cpu": "8"}}}


def bound(name: str) -> dict[str, object]:
    return pod(name, nodeName="n1", containers=[{"name": "main", "image": "busybox", **CPU}])


async def test_a_resume_whose_revision_expired_ends_expired_for_a_reader_that_lists_again(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(pod("old", workload="w"))
    async with ChangeLog(backend) as first:
        await first.wait_key("pod.default.old", "ADDED")
        await first.barrier(server, backend)
        last = first.changes[-1].revision
    await backend.delete("Pod", "old", namespace="default")
    server.compact()

    resumed = backend.watch(from_revision=last, lists_again=True)
    with pytest.raises(ExpiredError, match="expired; list again"):
        await drained(resumed)


async def drained(changes: AsyncGenerator[ClusterChange, None]) -> None:
    async with asyncio.timeout(wait_s(None)), contextlib.aclosing(changes):
        async for _ in changes:
            pass


async def test_a_pod_deleted_in_an_expired_gap_is_dropped_by_gangpermits_cache(
    server: ApiServer, backend: KubeBackend
) -> None:
    await backend.apply(node("n1"))
    await backend.apply(bound("ghost"))
    away = AwayWatch(backend)
    async with running_cache(away.backend()) as (state, cache):
        assert GHOST in state.pods

        away.away.set()
        await backend.apply(node("n2"))  # a change: the watch fails at it
        await asyncio.wait_for(away.failed.wait(), wait_s(None))
        await backend.delete("Pod", "ghost", namespace="default")
        server.compact()  # the deletion is gone from history: resuming gets 410
        away.away.clear()

        await cache.sync(timeout_s=wait_s(None))

        assert GHOST not in state.pods
        assert cache.relists == 1
