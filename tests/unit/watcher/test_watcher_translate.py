"""watcher.translate: which cluster objects become which events, with stable dedupe keys."""

from __future__ import annotations

import json
from typing import Any

import pytest

from muster.watcher import translate


def job(*, queue: str | None = "main", where: str = "labels", uid: str = "j-1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "ml", "uid": uid}
    if queue is not None:
        meta[where] = {"kueue.x-k8s.io/queue-name": queue}
    container = {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"parallelism": 3, "template": {"spec": {"containers": [container]}}},
    }


FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "ResourceFlavor",
    "metadata": {"name": "f"},
}
LOCAL_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "LocalQueue",
    "metadata": {"name": "main", "namespace": "ml"},
    "spec": {"clusterQueue": "cq"},
}


@pytest.mark.parametrize(
    ("obj", "config", "workload"),
    [
        (FLAVOR, True, False),
        (LOCAL_QUEUE, True, False),
        ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}, True, False),
        (job(), False, True),
        (job(where="annotations"), False, True),
        (job(queue=None), False, False),
        ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload"}, False, True),
        ({"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload"}, False, False),
        ({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}, False, False),
    ],
    ids=[
        "flavor",
        "local-queue",
        "namespace",
        "job-label",
        "job-annotation",
        "job-without-queue",
        "kueue-workload",
        "k8s-workload",
        "node",
    ],
)
def test_classifies_objects(obj: dict[str, Any], config: bool, workload: bool) -> None:
    assert translate.is_config(obj) is config
    assert translate.is_workload_source(obj) is workload


def test_config_applied_carries_the_object_and_names_it_with_its_namespace() -> None:
    out = translate.config_applied(LOCAL_QUEUE)
    assert (out.field, out.payload.kind, out.payload.name) == (
        "config_applied",
        "LocalQueue",
        "ml/main",
    )
    assert json.loads(out.payload.manifest_json) == LOCAL_QUEUE
    assert out.id_key == translate.config_applied(dict(LOCAL_QUEUE)).id_key
    changed = {**LOCAL_QUEUE, "spec": {"clusterQueue": "other"}}
    assert translate.config_applied(changed).id_key != out.id_key


def test_config_deleted_names_the_object() -> None:
    out = translate.config_deleted(FLAVOR)
    assert (out.field, out.payload.kind, out.payload.name) == (
        "config_deleted",
        "ResourceFlavor",
        "f",
    )


def test_a_queued_job_is_submitted_as_kueue_would_see_it() -> None:
    wl, problems = translate.workload_of(job())
    assert problems == []
    assert wl is not None
    out = translate.submitted(wl)
    assert out.field == "submitted"
    assert out.workload == wl.key
    assert wl.key.startswith("ml/job-train-")
    payload = out.payload
    assert payload.queue_name == "main"
    assert [(p.name, p.count, dict(p.requests)) for p in payload.pod_sets] == [
        ("main", 3, {"cpu": "500m", "memory": "1Gi"})
    ]
    assert (payload.owner.kind, payload.owner.name, payload.owner.uid) == ("Job", "train", "j-1")
    manifest = json.loads(payload.manifest_json)
    assert manifest["kind"] == "Workload"
    assert manifest["spec"]["podSets"][0]["count"] == 3
    assert out.id_key == translate.submitted(wl).id_key


def test_an_undecodable_job_is_reported_with_its_field() -> None:
    bad = job()
    bad["spec"]["parallelism"] = "many"
    wl, problems = translate.workload_of(bad)
    assert wl is None
    assert any("spec.parallelism" in p for p in problems)


def test_deleted_workload_keeps_its_key() -> None:
    wl, _ = translate.workload_of(job())
    assert wl is not None
    out = translate.deleted(wl)
    assert (out.field, out.workload) == ("deleted", wl.key)


def test_a_job_created_again_under_the_same_name_is_a_new_submission() -> None:
    first, again = job(), job()
    first["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    again["metadata"]["creationTimestamp"] = "2025-01-01T00:00:09Z"
    keys = set()
    for obj in (first, again):
        wl, _ = translate.workload_of(obj)
        assert wl is not None
        keys.add(translate.submitted(wl).id_key)
        keys.add(translate.deleted(wl).id_key)
    assert len(keys) == 4
