"""A MultiKueue copy's status, as a worker's watcher publishes it, is anyone's JSON: a worker
cluster's tenant, or a compromised worker watcher, can make it say anything. The manager's
watcher mirrors it onto the manager's Job or JobSet; what it cannot read counts for nothing,
and never stops the mirror. Before, `conditions` not a list (5) raised at the workload's next
eviction, in the status loop (no dead-letter there): the manager's watcher stopped, and
stopped again at each replay of that eviction."""

from __future__ import annotations

import json
from typing import Any

import pytest

from muster.bus import new_event
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.job_mirror import JobMirror
from muster.watcher.translate import owner_manifest

KEY = "ml/jobset-train-abcde"


def manager(kind: str) -> dict[str, Any]:
    """The manager's Job or JobSet, suspended, managed by MultiKueue."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2" if kind == "JobSet" else "batch/v1",
        "kind": kind,
        "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1"},
        "spec": {"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue"},
    }


def event(field: str, payload: Any) -> pb.Envelope:
    return new_event(field, payload, cluster="east", workload=KEY, source="attacker")


def copied(status: object) -> pb.Envelope:
    return event("copy_status", pb.CopyStatus(status_json=json.dumps(status)))


HOSTILE: list[object] = [
    {"conditions": 5},
    {"conditions": "Completed"},
    {"conditions": {"type": "Failed", "status": "True"}},
    {"conditions": [5, None, "x", {"type": 7}]},
    {"replicatedJobsStatus": {"workers": 1}},
    {"replicatedJobsStatus": "x", "succeeded": "many"},
    {"replicatedJobsStatus": [{"name": "workers", "active": 10**30, "ready": -5}, 3]},
    {"succeeded": 10**30, "failed": -1, "active": True},
]


@pytest.mark.parametrize("kind", ["Job", "JobSet"])
@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: json.dumps(h)[:40])
def test_a_hostile_copy_status_then_an_eviction_stops_nothing(kind: str, hostile: object) -> None:
    mirror, ref = JobMirror(), ObjectRef(kind=kind, name="train", namespace="ml")
    submitted = pb.WorkloadSubmitted(owner_manifest_json=owner_manifest(manager(kind)))
    mirror.apply(event("submitted", submitted))
    mirror.apply(event("admitted", pb.WorkloadAdmitted()))

    assert mirror.apply(copied(hostile)) == [(ref, hostile)]  # mirrored whole, as Kueue does
    stopped = mirror.apply(event("evicted", pb.WorkloadEvicted()))
    assert [r for r, _ in stopped] in ([], [ref])

    # Admitted again, the next honest status is mirrored: the mirror still runs.
    mirror.apply(event("admitted", pb.WorkloadAdmitted()))
    honest = {"active": 1, "ready": 1}
    [(got_ref, got)] = mirror.apply(copied(honest))
    assert got_ref == ref
    assert got["active"] == 1


@pytest.mark.parametrize("text", ["", "{", "[1,2]", "null", '"status"', "1e999"])
def test_a_copy_status_that_is_not_a_json_object_is_passed_over(text: str) -> None:
    mirror = JobMirror()
    submitted = pb.WorkloadSubmitted(owner_manifest_json=owner_manifest(manager("JobSet")))
    mirror.apply(event("submitted", submitted))
    mirror.apply(event("admitted", pb.WorkloadAdmitted()))

    assert mirror.apply(event("copy_status", pb.CopyStatus(status_json=text))) == []
    assert mirror.apply(event("evicted", pb.WorkloadEvicted())) == []
