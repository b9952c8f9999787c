"""The manager's JobSet managed by MultiKueue shows its copy's status, whole, as Kueue's JobSet
adapter copies it (`SyncJob`), from the worker where the workload runs now; evicted, it runs
nowhere, so no replicatedJob counts an active or ready Job; a JobSet without that managedBy
is never written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from muster.bus import new_event
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.job_mirror import JobMirror
from muster.watcher.status import RunsOn
from muster.watcher.translate import owner_manifest

KEY = "ml/jobset-train-abcde"
REF = ObjectRef(kind="JobSet", name="train", namespace="ml")


def manager_jobset(*, managed: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"suspend": True, "replicatedJobs": [{"name": "workers"}]}
    if managed:
        spec["managedBy"] = "kueue.x-k8s.io/multikueue"
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1"},
        "spec": spec,
    }


def status(
    active: int, ready: int, succeeded: int = 0, *, completed: bool = False, ended: str = ""
) -> dict[str, Any]:
    """A JobSet's status; `ended` (or `completed`) names the condition that ended it."""
    row = {"name": "workers", "active": active, "ready": ready, "succeeded": succeeded}
    out: dict[str, Any] = {"replicatedJobsStatus": [row], "restarts": 0}
    ended = ended or ("Completed" if completed else "")
    if ended:
        out["conditions"] = [{"type": ended, "status": "True"}]
        out["terminalState"] = ended
    return out


def env(field: str, cluster: str, payload: Any) -> pb.Envelope:
    return new_event(field, payload, cluster=cluster, workload=KEY, source="t")


class Manager:
    def __init__(self, owner: dict[str, Any]) -> None:
        self.runs_on, self.mirror = RunsOn("local"), JobMirror()
        submitted = pb.WorkloadSubmitted(owner_manifest_json=owner_manifest(owner))
        self.apply(env("submitted", "local", submitted))

    def apply(self, e: pb.Envelope) -> list[tuple[ObjectRef, dict[str, Any]]]:
        return self.mirror.apply(e) if self.runs_on.counts(e) else []

    def copied(self, cluster: str, copy_status: dict[str, Any]) -> list[Any]:
        payload = pb.CopyStatus(status_json=json.dumps(copy_status))
        return self.apply(env("copy_status", cluster, payload))


def test_a_managed_jobsets_status_is_its_copys_whole_from_where_it_runs() -> None:
    m = Manager(manager_jobset())
    m.apply(env("admitted", "east", pb.WorkloadAdmitted()))
    assert m.copied("east", status(2, 2)) == [(REF, status(2, 2))]
    assert m.copied("west", status(1, 0)) == []  # not where it runs
    # Evicted: it runs nowhere; what succeeded stays.
    [(_, stopped)] = m.apply(env("evicted", "east", pb.WorkloadEvicted()))
    assert stopped == status(0, 0, succeeded=0)
    assert m.copied("east", status(1, 1)) == []  # its copy, being deleted, counts for nothing
    m.apply(env("admitted", "west", pb.WorkloadAdmitted()))
    done = status(0, 0, succeeded=2, completed=True)
    assert m.copied("west", done) == [(REF, done)]
    assert m.mirror.desired() == [(REF, done)]  # what a restarted watcher writes


@pytest.mark.parametrize("ended", ["Completed", "Failed"])
def test_a_finished_jobset_evicted_afterwards_keeps_its_last_status(ended: str) -> None:
    """A JobSet ends with condition Completed (a Job's is Complete) or Failed; its counts as
    it ended stay: an eviction after the end writes nothing."""
    m = Manager(manager_jobset())
    m.apply(env("admitted", "east", pb.WorkloadAdmitted()))
    last = status(1, 1, succeeded=1, ended=ended)  # one workers Job still counted as it ended
    assert m.copied("east", last) == [(REF, last)]

    assert m.apply(env("evicted", "east", pb.WorkloadEvicted())) == []
    assert m.mirror.desired() == [(REF, last)]


def test_a_jobset_without_multikueues_managed_by_is_never_written() -> None:
    m = Manager(manager_jobset(managed=False))
    m.apply(env("admitted", "east", pb.WorkloadAdmitted()))
    assert m.copied("east", status(2, 2)) == []
    assert m.mirror.desired() == []
