"""The stand-in's RuntimeClass admission, as the real API server's: a new pod naming a
RuntimeClass gets its overhead and scheduling, and one the plugin refuses gets 403 Forbidden in
Kubernetes' words."""

from __future__ import annotations

from typing import Any

import pytest
from kube_helpers import api_client, as_model, present, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.devtools.apiserver import ThreadedApiServer

KATA: dict[str, Any] = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "kata"},
    "handler": "kata",
    "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
    "scheduling": {
        "nodeSelector": {"runtime": "kata"},
        "tolerations": [{"key": "kata", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


@pytest.fixture
def node_api(apiserver: ThreadedApiServer) -> Any:
    api = api_client(apiserver.url)
    yield client.NodeV1Api(api)
    api.close()  # type: ignore[no-untyped-call]  # the client has no hints here


def _pod(name: str, **spec: Any) -> Any:
    containers = [{"name": "main", "image": "busybox:1.36"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": containers, **spec}}  # fmt: skip


def test_a_pod_gets_its_runtime_class_overhead_and_scheduling(
    core: client.CoreV1Api, node_api: client.NodeV1Api
) -> None:
    node_api.create_runtime_class(as_model(client.V1RuntimeClass, KATA))
    created = core.create_namespaced_pod("default", _pod("p", runtimeClassName="kata"))
    spec = present(created.spec)
    assert spec.overhead == {"cpu": "250m", "memory": "120Mi"}
    assert spec.node_selector == {"runtime": "kata"}
    assert [t.key for t in spec.tolerations or []][-1] == "kata"
    # The same overhead, spelled otherwise, is the same: admitted.
    same = _pod("q", runtimeClassName="kata", overhead={"cpu": "0.25", "memory": "120Mi"})
    core.create_namespaced_pod("default", same)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"runtimeClassName": "gvisor"}, 'pod rejected: RuntimeClass "gvisor" not found'),
        (
            {"runtimeClassName": "kata", "overhead": {"cpu": "1"}},
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
        ),
        (
            {"overhead": {"cpu": "1"}},
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        ),
        (
            {"runtimeClassName": "kata", "nodeSelector": {"runtime": "runc"}},
            "conflict: runtimeClass.scheduling.nodeSelector[runtime] = kata; "
            "pod.spec.nodeSelector[runtime] = runc",
        ),
    ],
)
def test_a_pod_the_plugin_refuses_gets_403_in_kubernetes_words(
    core: client.CoreV1Api, node_api: client.NodeV1Api, spec: dict[str, Any], message: str
) -> None:
    node_api.create_runtime_class(as_model(client.V1RuntimeClass, KATA))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", _pod("p", **spec))
    assert caught.value.status == 403
    status = status_of(caught.value)
    assert (status["reason"], status["message"]) == (
        "Forbidden",
        f'pods "p" is forbidden: {message}',
    )
    assert core.list_namespaced_pod("default").items == []
