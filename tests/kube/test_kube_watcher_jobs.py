"""What the watcher reads from a Kubernetes cluster besides the simulated one's objects: the
Kueue Workload muster creates for a Job is the Job's (not a second workload), a Job muster
started is the Job its owner wrote, a Job's end comes from its conditions (not from its pods,
which are retried), and muster's own status writes are no configuration change."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from muster.api.model import Toleration
from muster.cluster.backend import PodSetStart
from muster.cluster.kube import jobs
from muster.watcher import translate
from muster.watcher.pods import Sent, due_events, pod_state

JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "train",
        "namespace": "ml",
        "uid": "job-uid",
        "generation": 1,
        "labels": {"kueue.x-k8s.io/queue-name": "lq"},
    },
    "spec": {
        "suspend": True,
        "parallelism": 3,
        "completions": 3,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "m", "resources": {"requests": {"cpu": "1"}}}],
            }
        },
    },
}
STARTED = PodSetStart(
    name="main",
    count=2,
    requests={"cpu": 1000},
    node_selector={"pool": "batch"},
    tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
)


def started(job: dict[str, Any]) -> dict[str, Any]:
    """`job` as the binder leaves it, with the generation the API server then gives it."""
    out = jobs.started_job(job, [STARTED], workload=jobs.workload_name(job))
    assert out is not None
    out["metadata"]["generation"] = job["metadata"]["generation"] + 1
    return out


def test_a_job_started_by_muster_is_still_the_workload_first_submitted() -> None:
    before, _ = translate.workload_of(JOB)
    after, _ = translate.workload_of(started(JOB))
    assert before is not None
    assert after is not None
    assert translate.incarnation(after) == translate.incarnation(before)
    assert translate.submitted(after).payload == translate.submitted(before).payload
    assert after.pod_sets[0].count == 3  # not the 2 admitted


def test_a_job_started_with_routed_requests_is_still_the_workload_first_submitted() -> None:
    routed = msgspec.structs.replace(STARTED, requests={"cpu": 4000}, routed=True)  # alternative
    out = jobs.started_job(JOB, [routed], workload=jobs.workload_name(JOB))
    assert out is not None
    assert out["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "4"}
    }
    before, _ = translate.workload_of(JOB)
    after, _ = translate.workload_of(out)
    assert before is not None
    assert after is not None
    assert translate.submitted(after).payload == translate.submitted(before).payload


def test_a_job_changed_by_its_owner_after_the_start_is_read_as_written() -> None:
    job = started(JOB)
    job["spec"]["template"]["spec"]["nodeSelector"]["disk"] = "ssd"  # not muster's
    restored = jobs.as_written(job)
    assert restored["spec"]["template"]["spec"].get("nodeSelector") is None
    assert restored["spec"]["parallelism"] == 3
    assert jobs.ORIGINAL_ANNOTATION not in restored["metadata"].get("annotations", {})
    assert jobs.as_written(JOB) is JOB  # never started: as it is


def workload_object(owner_kind: str | None) -> dict[str, Any]:
    refs = (
        [{"apiVersion": "batch/v1", "kind": owner_kind, "name": "train", "uid": "job-uid",
          "controller": True}]
        if owner_kind else []
    )  # fmt: skip
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "job-train-1a2b3", "namespace": "ml", "ownerReferences": refs},
        "spec": {"queueName": "lq", "podSets": []},
    }


@pytest.mark.parametrize(("owner", "source"), [("Job", False), (None, True)])
def test_the_kueue_workload_of_a_job_is_the_jobs(owner: str | None, source: bool) -> None:
    assert translate.is_workload_source(workload_object(owner)) is source


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], None),
        ([{"type": "Suspended", "status": "True"}], None),
        ([{"type": "Complete", "status": "True"}], (True, "Job finished successfully")),
        (
            [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}],
            (False, "BackoffLimitExceeded"),
        ),
        ([{"type": "Complete", "status": "False"}], None),
    ],
    ids=["running", "suspended", "complete", "failed", "not-yet"],
)
def test_a_jobs_end_is_what_its_conditions_say(
    conditions: list[dict[str, str]], expected: tuple[bool, str] | None
) -> None:
    job = copy.deepcopy(JOB)
    job["status"] = {"conditions": conditions}
    wl, _ = translate.workload_of(job)
    assert wl is not None
    out = translate.job_finished(job, wl.key)
    if expected is None:
        assert out is None
        return
    assert out is not None
    assert (out.payload.succeeded, out.payload.message) == expected
    assert (out.workload, out.id_key) == (wl.key, "finished/job/job-uid")


def job_pod(i: int, phase: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"train-{i}",
            "namespace": "ml",
            "uid": f"pod-{i}",
            "labels": {"muster.dev/workload": "job-train-1a2b3"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}
            ],
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase},
    }


def test_a_failed_pod_of_a_job_does_not_end_its_workload() -> None:
    pods = [pod_state(job_pod(0, "Failed")), pod_state(job_pod(1, "Running"))]
    assert all(p is not None and p.of_job for p in pods)
    due = due_events("ml/job-train-1a2b3", [p for p in pods if p], Sent())
    assert "finished" not in [o.field for o in due]
    done = [pod_state(job_pod(i, "Succeeded")) for i in range(2)]
    due = due_events("ml/job-train-1a2b3", [p for p in done if p], Sent())
    assert [o.field for o in due] == ["running"]  # and ready


def test_a_status_write_is_no_configuration_change() -> None:
    queue: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq", "resourceVersion": "10", "generation": 1},
        "spec": {"namespaceSelector": {}},
    }
    written = copy.deepcopy(queue)
    written["metadata"]["resourceVersion"] = "11"
    written["status"] = {"pendingWorkloads": 3}
    assert translate.config_applied(written).id_key == translate.config_applied(queue).id_key
    respecified = copy.deepcopy(queue)
    respecified["spec"]["cohort"] = "all"
    assert translate.config_applied(respecified).id_key != translate.config_applied(queue).id_key
