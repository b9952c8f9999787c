"""The visibility API's paths as the aggregation layer forwards them (`kube_visibility.query_of`):
a name no queue can have is a 400 Status naming the field, never a 404, and no answer echoes
a hostile path or parameter whole."""

from __future__ import annotations

import pytest

from muster.gateway.kube_visibility import Answer, Query, query_of

BASE = "/apis/visibility.kueue.x-k8s.io/v1beta2"
HUGE = "q" * 8_000  # about what fits in a request line


@pytest.mark.parametrize(
    ("path", "field", "problem"),
    [
        (f"{BASE}/clusterqueues/Team_A/pendingworkloads", "metadata.name", "must be a DNS-1123"),
        (f"{BASE}/clusterqueues/{HUGE}/pendingworkloads", "metadata.name", "must be no more"),
        (f"{BASE}/clusterqueues/a..b/pendingworkloads", "metadata.name", "must be a DNS-1123"),
        (
            f"{BASE}/namespaces/{'n' * 64}/localqueues/lq/pendingworkloads",
            "metadata.namespace",
            "must be no more than 63 characters",
        ),
        (
            f"{BASE}/namespaces/team-a/localqueues/lq%20x/pendingworkloads",
            "metadata.name",
            "must be a DNS-1123",
        ),
    ],
    ids=["underscore", "huge", "empty-part", "namespace-64", "odd-character"],
)
def test_a_name_no_queue_can_have_is_bad_request_naming_the_field(
    path: str, field: str, problem: str
) -> None:
    answer = query_of(path, {})

    assert isinstance(answer, Answer)
    assert (answer.status, answer.body["reason"]) == (400, "BadRequest")
    [cause] = answer.body["details"]["causes"]
    assert (cause["field"], cause["reason"]) == (field, "FieldValueInvalid")
    assert cause["message"].startswith(problem)
    assert f": {field}: {problem}" in answer.body["message"]
    assert len(answer.body["message"]) <= 512


def test_a_valid_name_is_a_query_whatever_it_names() -> None:
    path = f"{BASE}/namespaces/team-a/localqueues/{'l' * 253}/pendingworkloads"

    assert query_of(path, {"limit": "5"}) == Query(
        version="v1beta2", plural="localqueues", name="l" * 253, namespace="team-a", limit=5
    )


def test_a_bad_number_is_named_without_its_whole_text() -> None:
    answer = query_of(f"{BASE}/clusterqueues/cq/pendingworkloads", {"limit": HUGE})

    assert isinstance(answer, Answer)
    assert answer.status == 400
    assert answer.body["message"].startswith('limit: must be an integer, got "qqq')
    assert len(answer.body["message"]) <= 512
