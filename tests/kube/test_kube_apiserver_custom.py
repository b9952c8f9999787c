"""Custom resources and discovery: Kueue objects at v1beta1 and v1beta2 from one store, their
status subresources, CRDs applied through the API, and the discovery documents clients read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kube_helpers import api_client, as_json, as_model, cluster_queue, present, status_of, workload
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.devtools.apiserver import ApiServer, ThreadedApiServer, builtin_resources

KUEUE = "kueue.x-k8s.io"


def test_a_kueue_object_is_served_at_both_versions(custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", cluster_queue("cq"))
    as_v1beta2 = as_json(custom.get_cluster_custom_object(KUEUE, "v1beta2", "clusterqueues", "cq"))
    assert as_v1beta2["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    listed = as_json(custom.list_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues"))
    assert listed["kind"] == "ClusterQueueList"
    assert listed["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["cq"]


def test_custom_status_is_dropped_on_create_and_written_through_status(
    custom: client.CustomObjectsApi,
) -> None:
    body = cluster_queue("cq")
    body["status"] = {"pendingWorkloads": 5}
    created = as_json(custom.create_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", body))
    assert "status" not in created
    ignored = as_json(
        custom.patch_cluster_custom_object(
            KUEUE, "v1beta1", "clusterqueues", "cq", {"status": {"pendingWorkloads": 1}}
        )
    )
    assert "status" not in ignored
    status: dict[str, Any] = {
        "pendingWorkloads": 1,
        "conditions": [{"type": "Active", "status": "True"}],
    }
    written = as_json(
        custom.patch_cluster_custom_object_status(
            KUEUE, "v1beta1", "clusterqueues", "cq", {"status": status}
        )
    )
    assert written["status"] == status
    assert written["metadata"]["generation"] == 1
    respec = as_json(
        custom.patch_cluster_custom_object(
            KUEUE, "v1beta1", "clusterqueues", "cq", {"spec": {"cohort": "all"}}
        )
    )
    assert respec["metadata"]["generation"] == 2
    assert respec["status"] == status


def test_a_workload_status_update_conflicts_on_a_stale_resource_version(
    custom: client.CustomObjectsApi,
) -> None:
    created = as_json(
        custom.create_namespaced_custom_object(
            KUEUE, "v1beta1", "default", "workloads", workload("w")
        )
    )
    custom.patch_namespaced_custom_object(
        KUEUE, "v1beta1", "default", "workloads", "w", {"metadata": {"labels": {"a": "b"}}}
    )
    created["status"] = {"conditions": [{"type": "QuotaReserved", "status": "True"}]}
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object_status(
            KUEUE, "v1beta1", "default", "workloads", "w", created
        )
    assert caught.value.status == 409


def test_strategic_merge_patch_is_refused_for_custom_resources(
    custom: client.CustomObjectsApi,
) -> None:
    custom.create_namespaced_custom_object(KUEUE, "v1beta1", "default", "workloads", workload("w"))
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            KUEUE,
            "v1beta1",
            "default",
            "workloads",
            "w",
            {"spec": {"active": False}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert caught.value.status == 415


def test_resource_flavors_have_no_status_subresource(custom: client.CustomObjectsApi) -> None:
    flavor = {
        "apiVersion": f"{KUEUE}/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "default-flavor"},
    }
    custom.create_cluster_custom_object(KUEUE, "v1beta1", "resourceflavors", flavor)
    with pytest.raises(ApiException) as caught:
        custom.get_cluster_custom_object_status(
            KUEUE, "v1beta1", "resourceflavors", "default-flavor"
        )
    assert caught.value.status == 404


def test_pod_groups_and_the_workload_api_are_served(custom: client.CustomObjectsApi) -> None:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "gang"},
        "spec": {"minMember": 4},
    }
    custom.create_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups", group
    )
    gang = {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "gang"},
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]},
    }
    custom.create_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha1", "default", "workloads", gang
    )
    assert (
        as_json(
            custom.get_namespaced_custom_object(
                "scheduling.k8s.io", "v1alpha1", "default", "workloads", "gang"
            )
        )["spec"]
        == gang["spec"]
    )


def _crd(plural: str = "clusterqueues", kind: str = "ClusterQueue") -> dict[str, Any]:
    version = {
        "served": True,
        "schema": {"openAPIV3Schema": {"type": "object"}},
        "subresources": {"status": {}},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{KUEUE}"},
        "spec": {
            "group": KUEUE,
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
            },
            "scope": "Cluster",
            "versions": [
                {**version, "name": "v1beta1", "storage": True},
                {**version, "name": "v1beta2", "storage": False},
            ],
        },
    }


@pytest.fixture
def bare() -> Iterator[ThreadedApiServer]:
    with ThreadedApiServer(ApiServer(resources=builtin_resources())) as server:
        yield server


def test_a_crd_applied_through_the_api_serves_its_resource(bare: ThreadedApiServer) -> None:
    kube = api_client(bare.url)
    custom = client.CustomObjectsApi(kube)
    extensions = client.ApiextensionsV1Api(kube)
    with pytest.raises(ApiException) as missing:
        custom.list_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues")
    assert missing.value.status == 404
    created = extensions.create_custom_resource_definition(
        as_model(client.V1CustomResourceDefinition, _crd())
    )
    assert {c.type for c in present(present(created.status).conditions)} == {
        "NamesAccepted",
        "Established",
    }
    custom.create_cluster_custom_object(
        KUEUE, "v1beta2", "clusterqueues", cluster_queue("cq", version="v1beta2")
    )
    assert (
        as_json(custom.get_cluster_custom_object_status(KUEUE, "v1beta1", "clusterqueues", "cq"))[
            "metadata"
        ]["name"]
        == "cq"
    )
    extensions.delete_custom_resource_definition(f"clusterqueues.{KUEUE}")
    with pytest.raises(ApiException) as gone:
        custom.list_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues")
    assert gone.value.status == 404


def test_a_crd_named_unlike_its_plural_and_group_is_invalid(bare: ThreadedApiServer) -> None:
    body = _crd()
    body["metadata"]["name"] = "queues.example.com"
    with pytest.raises(ApiException) as caught:
        client.ApiextensionsV1Api(api_client(bare.url)).create_custom_resource_definition(
            as_model(client.V1CustomResourceDefinition, body)
        )
    assert caught.value.status == 422
    assert status_of(caught.value)["details"]["causes"][0]["field"] == "metadata.name"


def test_discovery_lists_groups_versions_and_resources(kube: client.ApiClient) -> None:
    assert client.CoreApi(kube).get_api_versions().versions == ["v1"]
    groups = {g.name: g for g in client.ApisApi(kube).get_api_versions().groups}
    assert {KUEUE, "batch", "scheduling.k8s.io", "scheduling.x-k8s.io"} <= set(groups)
    assert present(groups[KUEUE].preferred_version).version == "v1beta2"
    assert [v.version for v in groups[KUEUE].versions] == ["v1beta2", "v1beta1"]
    core = {r.name: r for r in client.CoreV1Api(kube).get_api_resources().resources}
    assert core["pods"].namespaced
    assert core["pods/binding"].verbs == ["create"]
    assert core["nodes"].namespaced is False
    batch = client.BatchV1Api(kube).get_api_resources()
    assert batch.group_version == "batch/v1"
    assert {r.name for r in batch.resources} == {
        "jobs",
        "jobs/status",
    }
    assert client.VersionApi(kube).get_code().major == "1"
