"""Which Kubernetes Events muster's events make (`muster.watcher.kube_events`)."""

from __future__ import annotations

from typing import Any

from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.kube_events import EventBook
from muster.watcher.pods import PodState

SECOND = 1_000_000_000


def event(field: str, payload: Any, *, at_s: float, workload: str = "ml/job-train-1") -> Any:
    return pb.Envelope(
        type=f"workload.{field}", workload=workload, time_unix_nano=int(at_s * SECOND),
        **{field: payload},
    )  # fmt: skip


def told(book: EventBook, env: pb.Envelope) -> list[tuple[str, str, str, str]]:
    return [(s.regarding.kind, s.type, s.reason, s.note) for s in book.apply(env)]


def admission() -> pb.Admission:
    return pb.Admission(cluster_queue="cq")


def test_a_jobs_workload_tells_its_story_on_the_workload_and_the_job() -> None:
    book = EventBook()
    owner = pb.OwnerRef(api_version="batch/v1", kind="Job", name="train", uid="job-uid")
    assert told(book, event("submitted", pb.WorkloadSubmitted(owner=owner), at_s=100)) == []
    reserved = book.apply(
        event("quota_reserved", pb.QuotaReserved(admission=admission()), at_s=103)
    )
    assert [(s.regarding.kind, s.regarding.name, s.regarding.uid) for s in reserved] == [
        ("Workload", "job-train-1", ""),  # its uid is the watch's to tell
        ("Job", "train", "job-uid"),
    ]
    assert reserved[0].note == "Quota reserved in ClusterQueue cq, wait time since queued was 3s"
    assert reserved[0].controller == "muster.dev/admission"
    admitted = told(book, event("admitted", pb.WorkloadAdmitted(admission=admission()), at_s=105))
    assert admitted[0][2:] == (
        "Admitted",
        "Admitted by ClusterQueue cq, wait time since reservation was 2s",
    )
    preempted = pb.WorkloadEvicted(reason="Preempted", message="to admit ml/urgent")
    assert [(k, r) for k, _, r, _ in told(book, event("evicted", preempted, at_s=110))] == [
        ("Workload", "Preempted"), ("Job", "Preempted"),
        ("Workload", "EvictedDueToPreempted"), ("Job", "EvictedDueToPreempted"),
    ]  # fmt: skip
    waiting = pb.WorkloadPending(reason="Inadmissible", message="LocalQueue lq doesn't exist")
    assert told(book, event("pending", waiting, at_s=111))[0][1:3] == ("Warning", "Inadmissible")
    failed = pb.WorkloadFinished(succeeded=False, message="pod failed")
    assert told(book, event("finished", failed, at_s=120))[0][1:] == (
        "Warning",
        "Finished",
        "pod failed",
    )
    assert told(book, event("deleted", pb.WorkloadDeleted(), at_s=121)) == []
    assert told(book, event("requeued", pb.WorkloadRequeued(), at_s=122)) == []  # forgotten


def test_an_admitted_stored_before_its_reservation_tells_both_in_kueues_order() -> None:
    book = EventBook()
    book.apply(event("submitted", pb.WorkloadSubmitted(), at_s=100, workload="ml/wl"))
    admitted = event("admitted", pb.WorkloadAdmitted(admission=admission()), at_s=104,
                     workload="ml/wl")  # fmt: skip
    assert told(book, admitted) == [
        ("Workload", "Normal", "QuotaReserved",
         "Quota reserved in ClusterQueue cq, wait time since queued was 4s"),
        ("Workload", "Normal", "Admitted",
         "Admitted by ClusterQueue cq, wait time since reservation was 0s"),
    ]  # fmt: skip
    late = event("quota_reserved", pb.QuotaReserved(admission=admission()), at_s=104,
                 workload="ml/wl")  # fmt: skip
    assert told(book, late) == []  # said already

    # Queued again: the next admission tells its own reservation.
    book.apply(event("evicted", pb.WorkloadEvicted(reason="Preempted"), at_s=110, workload="ml/wl"))
    book.apply(event("requeued", pb.WorkloadRequeued(), at_s=111, workload="ml/wl"))
    assert [r for _, _, r, _ in told(book, late)] == ["QuotaReserved"]
    assert [r for _, _, r, _ in told(book, admitted)] == ["Admitted"]


def test_a_deactivation_is_told_as_kueue_tells_it() -> None:
    book = EventBook()
    book.apply(event("submitted", pb.WorkloadSubmitted(), at_s=1, workload="ml/wl"))
    rejected = pb.WorkloadEvicted(reason="InactiveWorkload", message="check rejected it")
    (only,) = told(book, event("evicted", rejected, at_s=2, workload="ml/wl"))
    reason = "EvictedDueToDeactivatedDueToAdmissionCheck"  # Kueue's, with the cause
    assert only == ("Workload", "Normal", reason, "check rejected it")


def test_the_back_off_limit_is_told_as_a_deactivation_for_exceeding_it() -> None:
    book = EventBook()
    book.apply(event("submitted", pb.WorkloadSubmitted(), at_s=1, workload="ml/wl"))
    timeout = pb.WorkloadEvicted(reason="PodsReadyTimeout", message="timed out")
    assert [
        r for _, _, r, _ in told(book, event("evicted", timeout, at_s=2, workload="ml/wl"))
    ] == ["EvictedDueToPodsReadyTimeout"]
    limit = pb.WorkloadEvicted(reason="InactiveWorkload", message="limit")
    (only,) = told(book, event("evicted", limit, at_s=3, workload="ml/wl"))
    assert only[2] == "EvictedDueToDeactivatedDueToRequeuingLimitExceeded"


def pod(name: str, *, node: str = "", phase: str = "Pending") -> PodState:
    return PodState(namespace="ml", name=name, uid=f"{name}-uid", workload="ml/ring", node=node,
                    phase=phase)  # fmt: skip


def test_gang_placement_is_told_on_its_pods() -> None:
    pods = [pod("w-0"), pod("w-1", node="n1", phase="Running"), pod("w-2")]
    book = EventBook(pods_of=lambda key: pods if key == "ml/ring" else [])
    waiting = pb.GangWaiting(reason="3 of 4 pods pending", pending=3, min_count=4)
    specs = book.apply(event("gang_waiting", waiting, at_s=1, workload="ml/ring"))
    assert [(s.regarding.name, s.regarding.uid, s.reason, s.note) for s in specs] == [
        ("w-0", "w-0-uid", "FailedScheduling", "3 of 4 pods pending"),
        ("w-2", "w-2-uid", "FailedScheduling", "3 of 4 pods pending"),
    ]
    assert {s.controller for s in specs} == {"muster"}
    binding = pb.PodBinding(pod=pb.PodRef(namespace="ml", name="w-0", uid="w-0-uid"), node="n2")
    (bound,) = book.apply(event("bound", pb.PodsBound(bindings=[binding]), at_s=2))
    assert (bound.reason, bound.note) == ("Scheduled", "Successfully assigned ml/w-0 to n2")
    unknown = event("admitted", pb.WorkloadAdmitted(admission=admission()), at_s=3)
    assert book.apply(unknown) == []  # submitted before what this cluster remembers
