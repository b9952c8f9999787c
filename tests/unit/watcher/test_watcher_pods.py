"""watcher.pods: a workload's pods → pods_pending, running (and ready), finished; each once."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest

from muster.cluster.objects import pod_view
from muster.watcher.pods import (
    MAX_TOLD_UIDS,
    PodState,
    Sent,
    due_events,
    pod_state,
    pod_state_of_view,
)

WL = "ns/w"


def pod(
    i: int, phase: str = "Pending", *, node: str = "", message: str = "", ready: bool | None = None
) -> PodState:
    """Pod `i`; a Running one is Ready unless `ready` says otherwise (no readiness probe)."""
    return PodState(
        namespace="ns",
        name=f"w-main-{i}",
        uid=f"uid-{i}",
        workload=WL,
        pod_set="main",
        node=node,
        phase=phase,
        ready=phase == "Running" if ready is None else ready,
        message=message,
    )


def fields(pods: list[PodState], sent: Sent, **kw: Any) -> list[str]:
    return [o.field for o in due_events(WL, pods, sent, **kw)]


def publish_all(pods: list[PodState], sent: Sent) -> list[str]:
    """What is due, recorded as sent (what the handler does)."""
    out = due_events(WL, pods, sent)
    for o in out:
        sent.record(o, [p.uid for p in pods])
    return [o.field for o in out]


@pytest.mark.parametrize(
    ("status", "ready"),
    [
        ({"phase": "Failed", "message": "OOMKilled"}, False),
        # Readiness is the Ready condition, whatever else the pod's conditions say.
        ({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}, False),
        (
            {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
            },
            True,
        ),
    ],
)
def test_reads_a_pod_manifest(status: dict[str, Any], ready: bool) -> None:
    obj = {
        "metadata": {
            "name": "w-main-0",
            "namespace": "ns",
            "uid": "u",
            "labels": {"muster.dev/workload": "w"},
            "annotations": {"muster.dev/pod-set": "main"},
        },
        "spec": {"nodeName": "a"},
        "status": status,
    }
    state = pod_state(obj)
    assert state == PodState(
        namespace="ns",
        name="w-main-0",
        uid="u",
        workload="ns/w",
        pod_set="main",
        node="a",
        phase=status["phase"],
        ready=ready,
        message=status.get("message", ""),
    )
    assert pod_state({"metadata": {"name": "other"}}) is None


@pytest.mark.parametrize(
    ("labels", "spec", "key"),
    [
        pytest.param({}, {"workloadRef": {"name": "t", "podGroup": "g"}}, "ns/t/g", id="workload"),
        pytest.param(
            {},
            {"workloadRef": {"name": "t", "podGroup": "g", "podGroupReplicaKey": "1"}},
            "ns/t/g/1",
            id="replica",
        ),
        pytest.param({"scheduling.x-k8s.io/pod-group": "pg"}, {}, "ns/pg", id="pod-group"),
        pytest.param({"muster.dev/workload": "w"}, {}, "ns/w", id="kueue"),
    ],
)
def test_gang_pods_are_reported_under_their_gang_key(
    labels: dict[str, str], spec: dict[str, Any], key: str
) -> None:
    obj = {"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "spec": spec}
    state = pod_state(obj)
    assert state is not None
    assert state.workload == key


def test_pending_pods_are_reported_together_once_per_set() -> None:
    sent = Sent()
    assert publish_all([pod(0)], sent) == ["pods_pending"]
    assert publish_all([pod(0)], sent) == []
    out = due_events(WL, [pod(0), pod(1)], sent)
    assert [o.field for o in out] == ["pods_pending"]
    assert [p.name for p in out[0].payload.pods] == ["w-main-0", "w-main-1"]


def test_pending_pods_over_the_event_limit_are_counted_and_listed_only_as_far_as_they_fit() -> None:
    """20 000 pods pending listed 1.6 MB, over the bus's 1 MiB limit: the event was refused
    for good. Now the list stops at half the limit (lowered here) and `count` says how many."""
    limit = 8 * 1024
    pods = [pod(i) for i in range(1_000)]
    sent = Sent()

    (out,) = due_events(WL, pods, sent, max_event_bytes=limit)

    assert out.payload.count == 1_000
    assert 0 < len(out.payload.pods) < 1_000
    assert out.payload.ByteSize() <= limit // 2
    assert [p.name for p in out.payload.pods] == sorted(p.name for p in pods)[
        : len(out.payload.pods)
    ]
    sent.record(out, [p.uid for p in pods])
    assert due_events(WL, pods, sent, max_event_bytes=limit) == []  # told once per set


def test_pods_the_binder_started_for_an_admission_are_never_told_pending() -> None:
    """The binder labels what it starts with its admission: pending, those are no news to
    anyone (gang-permit says why they wait); the `running` after them still is."""
    labels = {"muster.dev/workload": "w", "muster.dev/admission": "42"}
    obj = {"metadata": {"name": "w-main-0", "namespace": "ns", "uid": "u", "labels": labels}}
    started = pod_state(obj)
    assert started is not None
    assert started.admission == 42
    assert fields([started], Sent()) == []
    viewed = pod_state_of_view(pod_view({**obj, "spec": {"containers": []}}))
    assert viewed is not None
    assert viewed.admission == 42  # as listed at a restart: decided alike
    assert fields([viewed], Sent()) == []
    running = msgspec.structs.replace(started, phase="Running", node="a", ready=True)
    assert fields([running], Sent()) == ["running"]


def test_bound_pods_are_not_pending() -> None:
    assert fields([pod(0, node="a"), pod(1, node="a")], Sent()) == []


def test_a_pod_deleted_makes_no_pending_news() -> None:
    assert fields([pod(1)], Sent(), after_delete=True) == []


def test_running_and_ready_then_finished_each_once() -> None:
    sent = Sent()
    assert publish_all([pod(0, "Running", node="a"), pod(1, node="a")], sent) == []
    running = [pod(0, "Running", node="a"), pod(1, "Running", node="a")]
    (started,) = due_events(WL, running, Sent())
    assert (started.field, started.payload.pods_ready) == ("running", True)  # no pods_ready
    assert publish_all(running, sent) == ["running"]
    assert publish_all(running, sent) == []
    done = [pod(0, "Succeeded", node="a"), pod(1, "Succeeded", node="a")]
    assert publish_all(done, sent) == ["finished"]
    assert publish_all(done, sent) == []
    # pods removed one by one after finishing: nothing new
    assert publish_all(done[1:], sent) == []


def test_pods_that_finished_unseen_still_report_running_first() -> None:
    out = due_events(WL, [pod(0, "Succeeded", node="a")], Sent())
    assert [o.field for o in out] == ["running", "finished"]
    assert out[0].payload.pods_ready
    assert out[-1].payload.succeeded
    assert out[-1].payload.message == "1 of 1 pods succeeded"


def test_any_failed_pod_finishes_the_workload_unsuccessfully() -> None:
    pods = [pod(0, "Running", node="a"), pod(1, "Failed", node="a", message="OOMKilled")]
    out = due_events(WL, pods, Sent())
    assert [o.field for o in out] == ["finished"]
    assert not out[0].payload.succeeded
    assert out[0].payload.message == "pod ns/w-main-1 failed: OOMKilled"


def test_new_pods_of_the_same_workload_are_a_new_life() -> None:
    sent = Sent()
    publish_all([pod(0, "Succeeded", node="a")], sent)
    sent.forget_pods_except([])
    assert sent.empty
    assert publish_all([pod(5, "Running", node="a")], sent) == ["running"]


def test_event_keys_are_stable_for_the_same_pods() -> None:
    pods = [pod(0, "Succeeded", node="a")]
    assert [o.id_key for o in due_events(WL, pods, Sent())] == [
        o.id_key for o in due_events(WL, list(reversed(pods)), Sent())
    ]


def test_pods_running_but_not_ready_are_running_then_ready_once() -> None:
    sent = Sent()
    unready = [pod(0, "Running", node="a", ready=False), pod(1, "Running", node="a")]
    (started,) = due_events(WL, unready, Sent())
    assert (started.field, started.payload.pods_ready) == ("running", False)
    assert publish_all(unready, sent) == ["running"]
    assert publish_all(unready, sent) == []
    ready = [pod(0, "Running", node="a"), pod(1, "Running", node="a")]
    assert publish_all(ready, sent) == ["pods_ready"]
    assert publish_all(ready, sent) == []


def lost_flags(pods: list[PodState], sent: Sent) -> list[tuple[str, bool]]:
    """What is due as (field, lost), recorded as sent."""
    out = due_events(WL, pods, sent)
    for o in out:
        sent.record(o, [p.uid for p in pods])
    return [(o.field, bool(getattr(o.payload, "lost", False))) for o in out]


def test_readiness_lost_after_the_start_then_regained_each_told_once() -> None:
    sent = Sent()
    ready = [pod(0, "Running", node="a"), pod(1, "Running", node="a")]
    unready = [pod(0, "Running", node="a", ready=False), pod(1, "Running", node="a")]
    assert lost_flags(ready, sent) == [("running", False)]
    assert lost_flags(unready, sent) == [("pods_ready", True)]
    assert lost_flags(unready, sent) == []
    assert lost_flags(ready, sent) == [("pods_ready", False)]
    assert lost_flags(ready, sent) == []
    # A second loss is a new fact: its event id differs from the first one's.
    (again,) = due_events(WL, unready, sent)
    sent.record(again, ["uid-0", "uid-1"])
    (back,) = due_events(WL, ready, sent)
    assert again.id_key != back.id_key
    assert again.id_key.endswith("/2")
    assert back.id_key.endswith("/2")


def test_readiness_not_told_yet_is_never_lost() -> None:
    sent = Sent()
    unready = [pod(0, "Running", node="a", ready=False)]
    assert lost_flags(unready, sent) == [("running", False)]
    assert lost_flags(unready, sent) == []


def test_a_jobs_failed_pod_is_replaced_not_counted() -> None:
    sent = Sent()
    ready = [job_pod(0, "Running"), job_pod(1, "Running")]
    assert lost_flags(ready, sent) == [("running", False)]
    replaced = [job_pod(0, "Running"), job_pod(1, "Failed"), job_pod(2, "Pending")]
    assert lost_flags(replaced, sent) == [("pods_ready", True)]
    again = [job_pod(0, "Running"), job_pod(1, "Failed"), job_pod(2, "Running")]
    assert lost_flags(again, sent) == [("pods_ready", False)]


def test_a_failed_pod_of_a_group_finishes_it_without_a_loss() -> None:
    sent = Sent()
    assert lost_flags([pod(0, "Running", node="a")], sent) == [("running", False)]
    failed = [pod(0, "Failed", node="a", message="OOMKilled")]
    assert lost_flags(failed, sent) == [("finished", False)]


def test_a_loss_ends_with_its_pods() -> None:
    sent = Sent()
    lost_flags([pod(0, "Running", node="a")], sent)
    lost_flags([pod(0, "Running", node="a", ready=False)], sent)
    sent.forget_pods_except([])
    assert sent.empty
    assert lost_flags([pod(5, "Running", node="a")], sent) == [("running", False)]


def job_pod(i: int, phase: str) -> PodState:
    return msgspec.structs.replace(pod(i, phase, node="a"), of_job=True)


def test_a_succeeded_pod_counts_as_ready_as_a_job_counts_it() -> None:
    sent = Sent()
    pods = [pod(0, "Running", node="a", ready=False), pod(1, "Succeeded", node="a")]
    assert publish_all(pods, sent) == ["running"]
    done = [pod(0, "Succeeded", node="a"), pod(1, "Succeeded", node="a")]
    assert publish_all(done, sent) == ["pods_ready", "finished"]


def test_a_workload_too_large_to_list_its_pods_still_runs_and_finishes_once() -> None:
    """A workload's `running` and `finished` list its pods' uids up to MAX_TOLD_UIDS (each such
    event within the bus's 1 MiB limit, uids as Kubernetes makes them); beyond, none: 50 000
    uids made an event of 1.9 MB, refused for good, and the workload never ran or finished for
    admission. Still each told once."""
    limit = 1024 * 1024

    def pods(count: int, phase: str) -> list[PodState]:
        return [
            msgspec.structs.replace(pod(i, phase, node="a"), uid=str(uuid.UUID(int=i)))
            for i in range(count)
        ]

    (largest,) = due_events(WL, pods(MAX_TOLD_UIDS, "Running"), Sent())
    assert len(largest.payload.pod_uids) == MAX_TOLD_UIDS
    assert largest.payload.ByteSize() < limit // 2

    sent = Sent()
    running = pods(MAX_TOLD_UIDS + 1, "Running")
    (started,) = due_events(WL, running, sent)
    assert (started.field, list(started.payload.pod_uids)) == ("running", [])
    assert publish_all(running, sent) == ["running"]
    assert publish_all(running, sent) == []
    done = pods(MAX_TOLD_UIDS + 1, "Succeeded")
    (finished,) = due_events(WL, done, sent)
    assert (finished.field, finished.payload.succeeded) == ("finished", True)
    assert list(finished.payload.pod_uids) == []
    assert publish_all(done, sent) == ["finished"]
    assert publish_all(done, sent) == []
