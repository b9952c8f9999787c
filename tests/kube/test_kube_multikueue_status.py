"""The manager's Job managed by MultiKueue shows its copy's status (issue 16): the worker's
watcher publishes the copy's status once per change, the manager's mirrors the one from where
the workload runs now, and the API-server stand-in treats a Job managed elsewhere as the real
one does (its Job controller leaves it alone; its status follows the server's rules)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kube_helpers import api_client, as_model, job, present, status_of, until
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.bus import new_event
from muster.bus.errors import BusError
from muster.cluster import ClusterChange
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.devtools.apiserver import ApiServer, ThreadedApiServer
from muster.watcher.handlers import WatcherContext, on_copy, on_workload_object
from muster.watcher.job_mirror import JobMirror
from muster.watcher.outbox import Outbox
from muster.watcher.pods import Sent
from muster.watcher.status import RunsOn
from muster.watcher.translate import owner_manifest

MANAGED_BY = "kueue.x-k8s.io/multikueue"
KEY = "ml/job-train-abcde"
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def manager_job(*, managed: bool = True, uid: str = "uid-1") -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    spec: dict[str, Any] = {
        "suspend": True,
        "parallelism": 2,
        "completions": 2,
        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
    }
    if managed:
        spec["managedBy"] = MANAGED_BY
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "uid": uid},
        "spec": spec,
    }


def running(active: int, *, succeeded: int = 0, failed: int = 0) -> dict[str, Any]:
    return {"startTime": T0, "active": active, "succeeded": succeeded, "failed": failed}


COMPLETE: dict[str, Any] = {
    "startTime": T0,
    "completionTime": T1,
    "active": 0,
    "succeeded": 2,
    "failed": 0,
    "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": T1},
        {"type": "Complete", "status": "True", "lastTransitionTime": T1},
    ],
}


def env(field: str, cluster: str, payload: Any, workload: str = KEY) -> pb.Envelope:
    return new_event(field, payload, cluster=cluster, workload=workload, source="t")


def submitted(job: dict[str, Any]) -> pb.Envelope:
    owner = owner_manifest(job)
    return env("submitted", "local", pb.WorkloadSubmitted(owner_manifest_json=owner))


def copied(cluster: str, status: dict[str, Any]) -> pb.Envelope:
    return env("copy_status", cluster, pb.CopyStatus(status_json=json.dumps(status)))


class Manager:
    """The manager's watcher's fold: `RunsOn` in front of the `JobMirror`, as `write_statuses`."""

    def __init__(self) -> None:
        self.runs_on, self.mirror = RunsOn("local"), JobMirror()

    def apply(self, e: pb.Envelope) -> list[tuple[ObjectRef, dict[str, Any]]]:
        return self.mirror.apply(e) if self.runs_on.counts(e) else []


JOB_REF = ObjectRef(kind="Job", name="train", namespace="ml")


def test_a_managed_jobs_status_is_its_copys_from_where_the_workload_runs_now() -> None:
    m = Manager()
    assert m.apply(submitted(manager_job())) == []
    m.apply(env("admitted", "east", pb.WorkloadAdmitted()))
    assert m.apply(copied("east", running(2))) == [(JOB_REF, running(2))]
    assert m.apply(copied("west", running(1))) == []  # not where it runs
    assert m.apply(copied("east", COMPLETE)) == [(JOB_REF, COMPLETE)]
    assert m.mirror.desired() == [(JOB_REF, COMPLETE)]  # what a restarted watcher writes


def test_a_job_without_multikueues_managed_by_is_never_written() -> None:
    m = Manager()
    m.apply(submitted(manager_job(managed=False)))
    m.apply(env("admitted", "east", pb.WorkloadAdmitted()))
    assert m.apply(copied("east", running(2))) == []
    assert m.mirror.desired() == []


def test_a_moved_workload_keeps_its_counts_and_stops_running_when_evicted() -> None:
    m = Manager()
    m.apply(submitted(manager_job()))
    m.apply(env("admitted", "east", pb.WorkloadAdmitted()))
    m.apply(copied("east", running(2, succeeded=1, failed=1)))
    # Evicted (east lost): nothing runs any more; what its pods did stays.
    [(_, stopped)] = m.apply(env("evicted", "east", pb.WorkloadEvicted()))
    assert stopped == {"succeeded": 1, "failed": 1}
    assert m.apply(copied("east", running(1, succeeded=1, failed=1))) == []  # being deleted
    m.apply(env("admitted", "west", pb.WorkloadAdmitted()))
    assert m.apply(copied("east", running(2))) == []  # east, back, reports its stale copy
    [(_, moved)] = m.apply(copied("west", running(2)))
    assert (moved["active"], moved["succeeded"], moved["failed"]) == (2, 1, 1)


def test_a_finished_job_stays_finished_and_a_new_job_starts_afresh() -> None:
    m = Manager()
    m.apply(submitted(manager_job()))
    m.apply(env("admitted", "east", pb.WorkloadAdmitted()))
    m.apply(copied("east", COMPLETE))
    assert m.apply(env("evicted", "east", pb.WorkloadEvicted())) == []
    m.apply(submitted(manager_job(uid="uid-2")))  # deleted and created again: a new Job
    assert m.mirror.desired() == []
    m.apply(env("deleted", "local", pb.WorkloadDeleted()))
    assert m.apply(copied("east", running(1))) == []


def test_a_copy_status_that_is_not_an_object_is_ignored() -> None:
    m = Manager()
    m.apply(submitted(manager_job()))
    bad = env("copy_status", "local", pb.CopyStatus(status_json="[1"))
    assert m.apply(bad) == []


# --- the worker's watcher ------------------------------------------------------------------


class Marks:
    def __init__(self) -> None:
        self.sent: dict[str, Sent] = {}

    def load(self, workload: str) -> Sent:
        return self.sent.setdefault(workload, Sent())

    def save(self, workload: str, sent: Sent) -> None:
        self.sent[workload] = sent

    note = save


class Recorder:
    def __init__(self) -> None:
        self.published: list[pb.Envelope] = []

    async def publish_many(self, envs: Sequence[pb.Envelope]) -> list[int | BusError]:
        self.published.extend(envs)
        return list(range(len(self.published) - len(envs) + 1, len(self.published) + 1))


def the_copy(status: dict[str, Any]) -> dict[str, Any]:
    out = manager_job(managed=False, uid="copy-uid")
    out["metadata"]["labels"] = {
        "kueue.x-k8s.io/multikueue-origin": "local",
        "kueue.x-k8s.io/prebuilt-workload-name": "job-train-abcde",
    }
    out["status"] = status
    return out


def change(obj: dict[str, Any], revision: int) -> ClusterChange:
    return ClusterChange(
        type="MODIFIED", kind="Job", key="obj.Job.ml.train", obj=obj, revision=revision
    )


async def test_the_worker_publishes_each_status_of_a_copy_once() -> None:
    recorder, marks = Recorder(), Marks()
    ctx = WatcherContext(cluster="east", outbox=Outbox(recorder), marks=marks)
    statuses = [{}, running(2), running(2), COMPLETE]
    for revision, status in enumerate(statuses, start=1):
        await on_copy(change(the_copy(status), revision), ctx)
    await ctx.outbox.flush()
    published = [(e.workload, e.type) for e in recorder.published]
    assert published == [
        (KEY, "workload.copy_status"),
        (KEY, "workload.copy_status"),
        (KEY, "workload.finished"),
    ]
    first, last = (json.loads(e.copy_status.status_json) for e in recorder.published[:2])
    assert (first, last) == (running(2), COMPLETE)
    # A resumed watch shows the same status again: the same event id (JetStream drops it).
    ctx2 = WatcherContext(cluster="east", outbox=Outbox(recorder), marks=Marks())
    await on_copy(change(the_copy(COMPLETE), 9), ctx2)
    await ctx2.outbox.flush()
    assert recorder.published[3].event_id == recorder.published[1].event_id


async def test_the_managers_own_job_reports_no_end_its_status_is_the_copys() -> None:
    recorder = Recorder()
    ctx = WatcherContext(cluster="local", outbox=Outbox(recorder), marks=Marks())
    for managed in (True, False):
        mirrored = manager_job(managed=managed, uid=f"uid-{managed}")
        mirrored["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "main"}
        mirrored["metadata"]["name"] = f"train-{managed}".lower()
        mirrored["metadata"]["creationTimestamp"] = T0
        mirrored["status"] = COMPLETE
        await on_workload_object(change(mirrored, 1), ctx)
    await ctx.outbox.flush()
    ends = [e.workload for e in recorder.published if e.type == "workload.finished"]
    assert len(ends) == 1
    assert "train-false" in ends[0]


# --- the API-server stand-in ---------------------------------------------------------------


@pytest.fixture
def batch() -> Iterator[client.BatchV1Api]:
    with ThreadedApiServer(ApiServer(job_controller=True)) as server:
        api = api_client(server.url)
        yield client.BatchV1Api(api)
        api.close()  # type: ignore[no-untyped-call]  # the client has no hints here


def managed(name: str = "train") -> dict[str, Any]:
    body = job(name, suspend=False, parallelism=2)
    body["spec"]["managedBy"] = MANAGED_BY
    return body


def test_the_job_controller_leaves_a_job_managed_elsewhere_alone(
    batch: client.BatchV1Api,
) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, managed("mirrored")))
    batch.create_namespaced_job(
        "default", as_model(client.V1Job, job("own", suspend=False, parallelism=2))
    )
    until(lambda: present(batch.read_namespaced_job_status("own", "default").status).active == 2)
    left = present(batch.read_namespaced_job_status("mirrored", "default").status)
    assert (left.active, left.start_time, left.conditions) == (None, None, None)


def test_a_managed_jobs_status_is_taken_running_then_complete(batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, managed()))
    batch.patch_namespaced_job_status("train", "default", {"status": running(2)})
    done = batch.patch_namespaced_job_status("train", "default", {"status": COMPLETE})
    assert [c.type for c in present(present(done.status).conditions)] == [
        "SuccessCriteriaMet",
        "Complete",
    ]


def _complete(**changes: Any) -> dict[str, Any]:
    status = copy.deepcopy(COMPLETE)
    for field, value in changes.items():
        if value is None:
            status.pop(field)
        else:
            status[field] = value
    return status


@pytest.mark.parametrize(
    ("status", "field"),
    [
        (_complete(completionTime=None), "status.completionTime"),
        (_complete(startTime=None), "status.startTime"),
        (_complete(active=1), "status.active"),
        (_complete(conditions=[COMPLETE["conditions"][1]]), "status.conditions"),
        (_complete(completionTime="2025-12-31T00:00:00Z"), "status.completionTime"),
        ({**running(1), "completionTime": T1}, "status.completionTime"),
        ({**running(1), "ready": 2}, "status.ready"),
        ({**running(1), "active": -1}, "status.active"),
    ],
)
def test_a_managed_jobs_status_that_breaks_the_servers_rules_is_422(
    batch: client.BatchV1Api, status: dict[str, Any], field: str
) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, managed()))
    with pytest.raises(ApiException) as caught:
        batch.patch_namespaced_job_status("train", "default", {"status": status})
    assert caught.value.status == 422
    assert field in [c["field"] for c in status_of(caught.value)["details"]["causes"]]


@pytest.mark.parametrize(
    ("then", "field"),
    [
        (running(1, succeeded=0), "status.succeeded"),  # counts never go down
        (_complete(completionTime="2026-01-01T00:06:00Z"), "status.completionTime"),
        # It stays finished: the condition cannot be turned off.
        ({"conditions": [{"type": "Complete", "status": "False"}]}, "status.conditions"),
    ],
)
def test_what_a_managed_job_reached_cannot_be_taken_back(
    batch: client.BatchV1Api, then: dict[str, Any], field: str
) -> None:
    batch.create_namespaced_job("default", as_model(client.V1Job, managed()))
    before = COMPLETE if field != "status.succeeded" else running(1, succeeded=1)
    batch.patch_namespaced_job_status("train", "default", {"status": before})
    with pytest.raises(ApiException) as caught:
        batch.patch_namespaced_job_status("train", "default", {"status": then})
    assert caught.value.status == 422
    assert field in [c["field"] for c in status_of(caught.value)["details"]["causes"]]
