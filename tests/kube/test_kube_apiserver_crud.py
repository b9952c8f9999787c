"""The stand-in's object lifecycle through the official client: create, get, update, patch and
delete with the real server's metadata rules, errors, finalizers and garbage collection."""

from __future__ import annotations

import pytest
from kube_helpers import (
    as_json,
    as_model,
    http_response,
    job,
    namespace,
    pod,
    present,
    status_of,
    workload,
)
from kubernetes import client
from kubernetes.client.exceptions import ApiException

KUEUE = "kueue.x-k8s.io"


def test_create_sets_uid_creation_timestamp_resource_version_and_generation(
    batch: client.BatchV1Api,
) -> None:
    created = batch.create_namespaced_job("default", as_model(client.V1Job, job("train")))
    md = present(created.metadata)
    assert md.uid
    assert md.creation_timestamp is not None
    assert int(present(md.resource_version)) > 0
    assert md.generation == 1
    again = batch.read_namespaced_job("train", "default")
    assert present(again.metadata).uid == md.uid
    assert present(again.metadata).resource_version == md.resource_version


def test_every_write_takes_a_higher_resource_version(core: client.CoreV1Api) -> None:
    created = [
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod(f"p{i}")))
        for i in range(3)
    ]
    versions = [int(present(present(p.metadata).resource_version)) for p in created]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


def test_reading_a_missing_object_is_404_not_found(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("ghost", "default")
    status = status_of(caught.value)
    assert caught.value.status == 404
    assert status["kind"] == "Status"
    assert status["status"] == "Failure"
    assert status["reason"] == "NotFound"
    assert status["details"] == {"name": "ghost", "kind": "pods"}
    assert status["message"] == 'pods "ghost" not found'


def test_creating_an_existing_name_is_409_already_exists(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "AlreadyExists"


def test_creating_in_a_missing_namespace_is_404_for_the_namespace(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("team-x", as_model(client.V1Pod, pod("p")))
    assert caught.value.status == 404
    assert status_of(caught.value)["details"] == {"name": "team-x", "kind": "namespaces"}


def test_a_malformed_object_is_422_invalid_with_one_cause_per_field(core: client.CoreV1Api) -> None:
    bad = pod("Not_A_Name", labels={"bad key!": "v"})
    bad["spec"]["containers"] = [{"name": "c"}]
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", as_model(client.V1Pod, bad))
    status = status_of(caught.value)
    assert caught.value.status == 422
    assert status["reason"] == "Invalid"
    assert status["details"]["kind"] == "Pod"
    fields = {c["field"]: c["reason"] for c in status["details"]["causes"]}
    assert fields == {
        "metadata.name": "FieldValueInvalid",
        "metadata.labels": "FieldValueInvalid",
        "spec.containers[0].image": "FieldValueRequired",
    }


def test_a_missing_name_is_required_unless_generate_name_is_given(core: client.CoreV1Api) -> None:
    nameless = pod("")
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", as_model(client.V1Pod, nameless))
    assert status_of(caught.value)["details"]["causes"][0]["field"] == "metadata.name"
    nameless["metadata"] = {"generateName": "worker-"}
    created = core.create_namespaced_pod("default", as_model(client.V1Pod, nameless))
    assert present(present(created.metadata).name).startswith("worker-")
    assert len(present(present(created.metadata).name)) == len("worker-") + 5


def test_an_update_from_a_stale_resource_version_is_409_conflict(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"step": "1"}}})
    present(first.metadata).labels = {"step": "2"}
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_pod("p", "default", first)
    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "Conflict"
    assert present(core.read_namespaced_pod("p", "default").metadata).labels == {"step": "1"}


def test_a_patch_naming_a_stale_resource_version_is_409_conflict(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "1"}}})
    stale = {
        "metadata": {
            "resourceVersion": present(created.metadata).resource_version,
            "labels": {"a": "2"},
        }
    }
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("p", "default", stale)
    assert caught.value.status == 409


def test_an_update_without_resource_version_is_unconditional_for_built_ins_only(
    core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    body = core.read_namespaced_pod("p", "default")
    present(body.metadata).resource_version = None
    present(body.metadata).labels = {"x": "y"}
    assert present(core.replace_namespaced_pod("p", "default", body).metadata).labels == {"x": "y"}

    custom.create_namespaced_custom_object(KUEUE, "v1beta1", "default", "workloads", workload("w"))
    current = as_json(
        custom.get_namespaced_custom_object(KUEUE, "v1beta1", "default", "workloads", "w")
    )
    del current["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as caught:
        custom.replace_namespaced_custom_object(
            KUEUE, "v1beta1", "default", "workloads", "w", current
        )
    assert caught.value.status == 422
    assert status_of(caught.value)["details"]["causes"][0]["field"] == "metadata.resourceVersion"


def test_a_write_that_changes_nothing_keeps_the_resource_version(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod(
        "default", as_model(client.V1Pod, pod("p", labels={"a": "1"}))
    )
    patched = core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "1"}}})
    replaced = core.replace_namespaced_pod("p", "default", patched)
    version = present(created.metadata).resource_version
    assert present(patched.metadata).resource_version == version
    assert present(replaced.metadata).resource_version == version


def test_generation_moves_on_spec_changes_only(batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, job("train")))
    labelled = batch.patch_namespaced_job(
        "train", "default", {"metadata": {"labels": {"team": "a"}}}
    )
    assert present(labelled.metadata).generation == 1
    resumed = batch.patch_namespaced_job("train", "default", {"spec": {"suspend": False}})
    assert present(resumed.metadata).generation == 2
    with_status = batch.patch_namespaced_job_status("train", "default", {"status": {"active": 3}})
    assert present(with_status.metadata).generation == 2


def test_status_goes_through_the_status_subresource_only(batch: client.BatchV1Api) -> None:
    created = batch.create_namespaced_job(
        "default", as_model(client.V1Job, {**job("train"), "status": {"active": 9}})
    )
    assert present(created.status).active is None  # status is not taken on create
    ignored = batch.patch_namespaced_job(
        "train", "default", {"status": {"active": 2}, "spec": {"suspend": False}}
    )
    assert present(ignored.status).active is None
    assert present(ignored.spec).suspend is False
    written = batch.patch_namespaced_job_status(
        "train", "default", {"status": {"active": 2}, "spec": {"suspend": True}}
    )
    assert present(written.status).active == 2
    assert present(written.spec).suspend is False


def test_merge_strategic_and_json_patches(core: client.CoreV1Api) -> None:
    body = pod("p", labels={"keep": "1", "drop": "1"})
    body["spec"]["containers"].append({"name": "side", "image": "busybox:1.36"})
    core.create_namespaced_pod("default", as_model(client.V1Pod, body))
    # Strategic merge (the client's default for built-ins): containers merge by name.
    merged = core.patch_namespaced_pod(
        "p",
        "default",
        {
            "metadata": {"labels": {"drop": None}},
            "spec": {"containers": [{"name": "side", "image": "busybox:1.37"}]},
        },
    )
    assert present(merged.metadata).labels == {"keep": "1"}
    assert [(c.name, c.image) for c in present(merged.spec).containers] == [
        ("main", "busybox:1.36"),
        ("side", "busybox:1.37"),
    ]
    # JSON patch: a list of operations.
    patched = core.patch_namespaced_pod(
        "p", "default", [{"op": "add", "path": "/metadata/labels/new", "value": "2"}]
    )
    assert present(patched.metadata).labels == {"keep": "1", "new": "2"}
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod(
            "p", "default", [{"op": "test", "path": "/metadata/labels/new", "value": "3"}]
        )
    assert caught.value.status == 422
    # Merge patch: lists are replaced whole.
    replaced = core.patch_namespaced_pod(
        "p",
        "default",
        {"metadata": {"annotations": {"a": "b"}}},
        _content_type="application/merge-patch+json",
    )
    assert present(replaced.metadata).annotations == {"a": "b"}


def test_delete_returns_the_object_then_it_is_gone(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    deleted = core.delete_namespaced_pod("p", "default", _preload_content=False)
    assert deleted.status == 200
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("p", "default")
    assert caught.value.status == 404


def test_delete_with_a_failing_uid_precondition_is_409(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", as_model(client.V1Pod, pod("p")))
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_pod(
            "p",
            "default",
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="other")),
        )
    assert caught.value.status == 409
    assert present(core.read_namespaced_pod("p", "default").metadata).name == "p"


def test_a_finalizer_holds_deletion_until_it_is_removed(core: client.CoreV1Api) -> None:
    body = pod("p")
    body["metadata"]["finalizers"] = ["muster.dev/hold"]
    core.create_namespaced_pod("default", as_model(client.V1Pod, body))
    response = core.delete_namespaced_pod("p", "default", _preload_content=False)
    assert response.status == 202
    held = core.read_namespaced_pod("p", "default")
    assert present(held.metadata).deletion_timestamp is not None
    with pytest.raises(ApiException) as caught:  # no new finalizers while deleting
        core.patch_namespaced_pod(
            "p", "default", {"metadata": {"finalizers": ["muster.dev/hold", "other/x"]}}
        )
    assert caught.value.status == 422
    core.patch_namespaced_pod("p", "default", [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(ApiException):
        core.read_namespaced_pod("p", "default")


def _owned_workload(batch: client.BatchV1Api, custom: client.CustomObjectsApi) -> str:
    owner = batch.create_namespaced_job("default", as_model(client.V1Job, job("train")))
    body = workload("job-train")
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": present(owner.metadata).uid,
            "controller": True,
        }
    ]
    custom.create_namespaced_custom_object(KUEUE, "v1beta1", "default", "workloads", body)
    return str(present(owner.metadata).uid)


def test_background_deletion_collects_owned_objects(
    batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    _owned_workload(batch, custom)
    batch.delete_namespaced_job("train", "default", propagation_policy="Background")
    listed = as_json(custom.list_namespaced_custom_object(KUEUE, "v1beta1", "default", "workloads"))
    assert listed["items"] == []


def test_deleting_a_job_orphans_its_dependents_by_default(
    batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    _owned_workload(batch, custom)
    batch.delete_namespaced_job("train", "default")
    kept = as_json(
        custom.get_namespaced_custom_object(KUEUE, "v1beta1", "default", "workloads", "job-train")
    )
    assert "ownerReferences" not in kept["metadata"]


def test_a_terminating_namespace_refuses_new_objects_then_goes_away(core: client.CoreV1Api) -> None:
    core.create_namespace(as_model(client.V1Namespace, namespace("team-a")))
    held = pod("held")
    held["metadata"]["finalizers"] = ["muster.dev/hold"]
    core.create_namespaced_pod("team-a", as_model(client.V1Pod, held))
    core.create_namespaced_pod("team-a", as_model(client.V1Pod, pod("plain")))
    terminating = http_response(core.delete_namespace("team-a", _preload_content=False))
    assert terminating.status == 200
    assert present(core.read_namespace("team-a").status).phase == "Terminating"
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("team-a", as_model(client.V1Pod, pod("late")))
    assert caught.value.status == 403
    assert [present(p.metadata).name for p in core.list_namespaced_pod("team-a").items] == ["held"]
    core.patch_namespaced_pod("held", "team-a", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        core.read_namespace("team-a")
    assert gone.value.status == 404


def test_namespaces_carry_their_name_label_and_the_system_ones_exist(
    core: client.CoreV1Api,
) -> None:
    names = {present(ns.metadata).name for ns in core.list_namespace().items}
    assert {"default", "kube-system"} <= names
    created = core.create_namespace(as_model(client.V1Namespace, namespace("team-b")))
    assert present(created.metadata).labels == {"kubernetes.io/metadata.name": "team-b"}
    assert present(created.status).phase == "Active"


def test_delete_collection_deletes_what_the_selector_matches(core: client.CoreV1Api) -> None:
    for i, team in enumerate(["a", "a", "b"]):
        core.create_namespaced_pod(
            "default", as_model(client.V1Pod, pod(f"p{i}", labels={"team": team}))
        )
    core.delete_collection_namespaced_pod("default", label_selector="team=a")
    assert [present(p.metadata).name for p in core.list_namespaced_pod("default").items] == ["p2"]
