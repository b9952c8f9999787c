"""Lists through the official client: label and field selectors, limit/continue paging at one
resourceVersion, resourceVersion and resourceVersionMatch semantics, 410 for expired tokens."""

from __future__ import annotations

import pytest
from kube_helpers import as_model, pod, present, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.devtools.apiserver import ThreadedApiServer


def _names(listed: client.V1PodList) -> list[str]:
    return [present(present(p.metadata).name) for p in listed.items]


@pytest.fixture
def team_pods(core: client.CoreV1Api) -> None:
    for name, team, tier in [
        ("a1", "a", "1"),
        ("a2", "a", "2"),
        ("b1", "b", "1"),
        ("c1", "c", "3"),
    ]:
        core.create_namespaced_pod(
            "default", as_model(client.V1Pod, pod(name, labels={"team": team, "tier": tier}))
        )
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("bare")))


@pytest.mark.usefixtures("team_pods")
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("team=a", ["a1", "a2"]),
        ("team==a,tier=2", ["a2"]),
        ("team!=a", ["b1", "bare", "c1"]),
        ("team in (a, b)", ["a1", "a2", "b1"]),
        ("team notin (a,b)", ["bare", "c1"]),
        ("team", ["a1", "a2", "b1", "c1"]),
        ("!team", ["bare"]),
        ("tier>1", ["a2", "c1"]),
        ("tier<2", ["a1", "b1"]),
    ],
)
def test_label_selectors(core: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    assert _names(core.list_namespaced_pod("default", label_selector=selector)) == expected


def test_a_malformed_label_selector_is_400(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", label_selector="team in (a")
    assert caught.value.status == 400
    assert status_of(caught.value)["reason"] == "BadRequest"


def test_field_selectors_on_node_name_scheduler_name_and_name(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("bound", node="node-1")))
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("mine", scheduler="muster")))
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("other")))
    unbound_mine = core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=,spec.schedulerName=muster"
    )
    assert _names(unbound_mine) == ["mine"]
    assert _names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")) == ["bound"]
    assert _names(core.list_namespaced_pod("default", field_selector="metadata.name=other")) == [
        "other"
    ]
    assert (
        _names(core.list_pod_for_all_namespaces(field_selector="metadata.namespace=kube-system"))
        == []
    )


def test_an_unsupported_field_label_is_400(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", field_selector="spec.containers=x")
    assert caught.value.status == 400
    assert "field label not supported" in status_of(caught.value)["message"]


def test_all_namespace_lists_are_ordered_by_namespace_then_name(core: client.CoreV1Api) -> None:
    core.create_namespace(as_model(client.V1Namespace, {"metadata": {"name": "alpha"}}))
    for ns, name in [("default", "b"), ("alpha", "z"), ("default", "a")]:
        core.create_namespaced_pod(ns, as_model(client.V1Pod, pod(name)))
    listed = core.list_pod_for_all_namespaces()
    assert [(present(p.metadata).namespace, present(p.metadata).name) for p in listed.items] == [
        ("alpha", "z"),
        ("default", "a"),
        ("default", "b"),
    ]


def test_paging_serves_every_page_at_the_first_pages_resource_version(
    core: client.CoreV1Api,
) -> None:
    for i in range(5):
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod(f"p{i}")))
    first = core.list_namespaced_pod("default", limit=2)
    assert _names(first) == ["p0", "p1"]
    assert present(first.metadata).remaining_item_count == 3
    core.delete_namespaced_pod("p3", "default")  # after the first page: not seen by the rest
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p5")))
    second = core.list_namespaced_pod(
        "default", limit=2, _continue=present(first.metadata)._continue
    )
    third = core.list_namespaced_pod(
        "default", limit=2, _continue=present(second.metadata)._continue
    )
    assert _names(second) == ["p2", "p3"]
    assert _names(third) == ["p4"]
    assert present(third.metadata)._continue is None
    assert (
        present(first.metadata).resource_version
        == present(second.metadata).resource_version
        == present(third.metadata).resource_version
    )


def test_a_continue_token_older_than_the_history_is_410_expired(
    apiserver: ThreadedApiServer, core: client.CoreV1Api
) -> None:
    for i in range(3):
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod(f"p{i}")))
    first = core.list_namespaced_pod("default", limit=1)
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("later")))
    apiserver.compact()
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", limit=1, _continue=present(first.metadata)._continue)
    assert caught.value.status == 410
    assert status_of(caught.value)["reason"] == "Expired"


def test_resource_version_match_exact_lists_the_past(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("early")))
    then = present(core.list_namespaced_pod("default").metadata).resource_version
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("late")))
    core.delete_namespaced_pod("early", "default")
    past = core.list_namespaced_pod(
        "default", resource_version=then, resource_version_match="Exact"
    )
    assert _names(past) == ["early"]
    assert present(past.metadata).resource_version == then
    now = core.list_namespaced_pod(
        "default", resource_version=then, resource_version_match="NotOlderThan"
    )
    assert _names(now) == ["late"]
    assert _names(core.list_namespaced_pod("default", resource_version="0")) == ["late"]


def test_a_resource_version_from_the_future_is_504_too_large(core: client.CoreV1Api) -> None:
    current = int(present(present(core.list_namespaced_pod("default").metadata).resource_version))
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", resource_version=str(current + 100))
    status = status_of(caught.value)
    assert caught.value.status == 504
    assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
