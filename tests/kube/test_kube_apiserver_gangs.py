"""The stand-in's scheduling.k8s.io gang API and Job controller, through the official client:
versions served per Kubernetes release, PodGroup validation and immutability (all but
`gang.minCount`), the status subresource, and Jobs that run pods (joining the PodGroup the
controller makes for `spec.scheduling`), stop them on suspend and complete."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
from kube_helpers import api_client, as_json, as_model, job, present, status_of, until
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.devtools.apiserver import ApiServer, ThreadedApiServer, default_resources

T = TypeVar("T")
GROUP = "scheduling.k8s.io"


@pytest.fixture
def server() -> Iterator[ThreadedApiServer]:
    standin = ApiServer(resources=default_resources("1.37"), job_controller=True)
    with ThreadedApiServer(standin) as running:
        yield running


@pytest.fixture
def kube(server: ThreadedApiServer) -> Iterator[client.ApiClient]:
    api = api_client(server.url)
    yield api
    api.close()  # type: ignore[no-untyped-call]  # the client has no hints here


def pod_group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, **spec},
    }


@pytest.mark.parametrize(
    ("release", "versions"),
    [
        ("1.35", ["v1alpha1"]),
        ("1.36", ["v1alpha2"]),
        ("1.37", ["v1beta1", "v1alpha3"]),
    ],
)
def test_each_release_serves_its_versions(release: str, versions: list[str]) -> None:
    with ThreadedApiServer(ApiServer(resources=default_resources(release))) as server:
        api = api_client(server.url)
        try:
            group = client.ApisApi(api).get_api_versions()
            (found,) = [g for g in group.groups if g.name == GROUP]
            assert [v.version for v in found.versions] == ["v1", *versions]
        finally:
            api.close()  # type: ignore[no-untyped-call]  # the client has no hints here


def test_a_cluster_without_the_gates_serves_only_priority_classes() -> None:
    with ThreadedApiServer(ApiServer(resources=default_resources(None))) as server:
        api = api_client(server.url)
        try:
            groups = client.ApisApi(api).get_api_versions().groups
            (found,) = [g for g in groups if g.name == GROUP]
            assert [v.version for v in found.versions] == ["v1"]
        finally:
            api.close()  # type: ignore[no-untyped-call]  # the client has no hints here


def test_pod_group_policy_is_validated(kube: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(kube)
    bad = pod_group("g", schedulingPolicy={"gang": {"minCount": 0}})
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(GROUP, "v1beta1", "default", "podgroups", bad)
    status = status_of(err.value)
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "spec.schedulingPolicy.gang.minCount"


def test_only_min_count_of_a_pod_group_spec_changes_and_status_is_a_subresource(
    kube: client.ApiClient,
) -> None:
    custom = client.CustomObjectsApi(kube)
    args = (GROUP, "v1beta1", "default", "podgroups")
    created = as_json(custom.create_namespaced_custom_object(*args, pod_group("g")))
    assert created["spec"]["disruptionMode"] == {"single": {}}  # defaulted
    assert created["spec"]["priority"] == 0  # priority admission
    lowered = as_json(
        custom.patch_namespaced_custom_object(
            *args, "g", {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
        )
    )
    assert lowered["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            *args, "g", {"spec": {"schedulingConstraints": {"topology": [{"key": "rack"}]}}}
        )
    assert status_of(err.value)["reason"] == "Invalid"
    condition = {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled"}
    written = as_json(
        custom.patch_namespaced_custom_object_status(
            *args, "g", {"status": {"conditions": [condition]}, "spec": {"schedulingPolicy": {}}}
        )
    )
    assert written["status"]["conditions"] == [condition]
    assert written["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}  # status only


def test_job_runs_pods_that_join_its_pod_group_then_completes(kube: client.ApiClient) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    custom = client.CustomObjectsApi(kube)
    manifest = job("train", suspend=False, parallelism=2)
    manifest["spec"]["scheduling"] = {
        "schedulingPolicy": {"gang": {}},
        "disruptionMode": {"all": {}},
    }
    created = batch.create_namespaced_job("default", as_model(client.V1Job, manifest))

    until(lambda: len(core.list_namespaced_pod("default").items) == 2)
    pods = core.list_namespaced_pod("default").items
    assert [present(present(p.spec).scheduling_group).pod_group_name for p in pods] == [
        "train",
        "train",
    ]
    group = as_json(
        custom.get_namespaced_custom_object(GROUP, "v1beta1", "default", "podgroups", "train")
    )
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert group["spec"]["disruptionMode"] == {"all": {}}
    (owner,) = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Job",
        "train",
        present(created.metadata).uid,
    )

    for p in pods:
        finished = {"status": {"phase": "Succeeded"}}
        core.patch_namespaced_pod_status(present(present(p.metadata).name), "default", finished)
    done = until(
        lambda: [
            c.type
            for c in present(batch.read_namespaced_job("train", "default").status).conditions or []
            if c.status == "True"
        ]
    )
    assert set(done) == {"SuccessCriteriaMet", "Complete"}
    assert present(batch.read_namespaced_job("train", "default").status).succeeded == 2


def test_suspending_a_job_deletes_its_pods(kube: client.ApiClient) -> None:
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    batch.create_namespaced_job(
        "default", as_model(client.V1Job, job("j", suspend=True, parallelism=3))
    )
    assert core.list_namespaced_pod("default").items == []
    batch.patch_namespaced_job("j", "default", {"spec": {"suspend": False}})
    until(lambda: len(core.list_namespaced_pod("default").items) == 3)
    assert present(batch.read_namespaced_job("j", "default").status).start_time is not None
    batch.patch_namespaced_job("j", "default", {"spec": {"suspend": True}})
    until(lambda: core.list_namespaced_pod("default").items == [])
    status = present(batch.read_namespaced_job("j", "default").status)
    assert status.active == 0
    assert [c.type for c in present(status.conditions)] == ["Suspended"]
