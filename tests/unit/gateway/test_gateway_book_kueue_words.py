"""`muster describe`'s conditions through an eviction say what Kueue's `kubectl describe
workload` would: the same condition, status, reason and message as the watcher writes on the
Workload in Kubernetes (`muster.watcher.kueue_status`), for the same events."""

from __future__ import annotations

from typing import Any

import pytest
from workload_manifest import workload_manifest

from muster.bus import new_event
from muster.cluster.kube import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.gateway.book import WorkloadBook
from muster.watcher.kueue_status.book import StatusBook

WL = ObjectRef(kind="Workload", namespace="ml", name="train")
TIMEOUT = "Exceeded the PodsReady timeout ml/train"
LIMIT = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
Words = dict[str, tuple[str, str, str]]


def event(field: str, payload: Any) -> pb.Envelope:
    return new_event(field, payload, cluster="local", workload="ml/train", source="t")


def admission() -> pb.Admission:
    return pb.Admission(cluster_queue="cq")


ADMITTED = ("admitted", pb.WorkloadAdmitted(admission=admission(), with_reservation=True))
STOPPED = ("eviction_completed", pb.EvictionCompleted())


def evicted(reason: str, message: str) -> tuple[str, Any]:
    return "evicted", pb.WorkloadEvicted(reason=reason, message=message)


def requeued(reason: str) -> tuple[str, Any]:
    return "requeued", pb.WorkloadRequeued(reason=reason, message="requeued")


def pending(reason: str, message: str) -> tuple[str, Any]:
    return "pending", pb.WorkloadPending(reason=reason, message=message, cluster_queue="cq")


STORIES: dict[str, list[tuple[str, Any]]] = {
    "preempted, pods gone": [ADMITTED, evicted("Preempted", "to admit ml/urgent"), STOPPED],
    "preempted, requeued, admitted again": [
        ADMITTED,
        evicted("Preempted", "to admit ml/urgent"),
        STOPPED,
        requeued("Evicted"),
        ADMITTED,
    ],
    "pods-ready timeout, back-off over": [
        ADMITTED,
        evicted("PodsReadyTimeout", TIMEOUT),
        STOPPED,
        requeued("BackoffFinished"),
    ],
    "check retry, nothing ran": [
        ("quota_reserved", pb.QuotaReserved(admission=admission(), admission_checks=["prov"])),
        evicted("AdmissionCheck", 'Evicted due to AdmissionCheck in Retry state: "prov"'),
        requeued("Evicted"),
    ],
    "cluster queue stopped, then restarted": [
        ADMITTED,
        evicted("ClusterQueueStopped", "The ClusterQueue is stopped"),
        STOPPED,
        requeued("Evicted"),
        pending("Suspended", "ClusterQueue cq is stopped"),
        pending("WaitingForQuota", "no room"),
    ],
    "back-off limit (stream before November 2026), reactivated": [
        ADMITTED,
        evicted("PodsReadyTimeout", TIMEOUT),
        STOPPED,
        evicted("InactiveWorkload", LIMIT),
        requeued("Reactivated"),
    ],
    "pods-ready timeout, stopped while backing off, reactivated": [
        ADMITTED,
        evicted("PodsReadyTimeout", TIMEOUT),
        STOPPED,
        ("active_changed", pb.WorkloadActiveChanged(active=False)),
        requeued("Reactivated"),
    ],
    "back-off limit": [
        ADMITTED,
        evicted("DeactivatedDueToRequeuingLimitExceeded", LIMIT),
        STOPPED,
    ],
    "preempted, a placement eviction's answer under its name": [
        ADMITTED,
        evicted("Preempted", "to admit ml/urgent"),
        ("eviction_completed", pb.EvictionCompleted(pods=3, part=0, parts=2, command_id="c")),
    ],
    "pending, stopped by its user": [
        pending("WaitingForQuota", "no room"),
        ("active_changed", pb.WorkloadActiveChanged(active=False)),
    ],
}


def both(story: list[tuple[str, Any]]) -> tuple[Words, Words]:
    """The conditions `muster describe` shows, and those the watcher writes in Kubernetes."""
    gateway, watcher = WorkloadBook(), StatusBook()
    for field, payload in [
        (
            "submitted",
            pb.WorkloadSubmitted(queue_name="lq", manifest_json=workload_manifest("ml/train")),
        ),
        *story,
    ]:
        env = event(field, payload)
        gateway.apply(env)
        watcher.apply(env)
    (entry,) = gateway.find("ml", "train")
    described = {c.type: (c.status, c.reason, c.message) for c in entry.describe().conditions}
    written = (watcher.status_of(WL) or {})["conditions"]
    return described, {c["type"]: (c["status"], c["reason"], c["message"]) for c in written}


@pytest.mark.parametrize("story", STORIES.values(), ids=STORIES.keys())
def test_describe_says_what_kueue_writes_on_the_workload(story: list[tuple[str, Any]]) -> None:
    described, written = both(story)
    assert described == written


def test_a_preempted_workload_reads_requeued_and_pending_evaluation_once_its_pods_are_gone() -> (
    None
):
    described, _ = both(STORIES["preempted, pods gone"])
    assert described["QuotaReserved"] == ("False", "PendingEvaluation", "to admit ml/urgent")
    assert described["Admitted"] == ("False", "NoReservation", "The workload has no reservation")
    assert described["Requeued"] == ("True", "Preempted", "to admit ml/urgent")
    again, _ = both(STORIES["preempted, requeued, admitted again"])
    assert again["Evicted"] == ("False", "QuotaReserved", "Previously: to admit ml/urgent")


def test_an_answer_naming_pods_is_not_the_end_of_a_kueue_eviction_in_either_reading() -> None:
    described, written = both(STORIES["preempted, a placement eviction's answer under its name"])
    for words in (described, written):
        assert words["QuotaReserved"][0] == "True"  # its own pods still stopping
        assert words["Evicted"][:2] == ("True", "Preempted")
        assert "Requeued" not in words or words["Requeued"][0] == "False"


def test_a_back_off_over_reads_backoff_finished() -> None:
    described, _ = both(STORIES["pods-ready timeout, back-off over"])
    assert described["Requeued"] == ("True", "BackoffFinished", "The workload backoff was finished")
    assert described["QuotaReserved"] == (
        "False",
        "PendingEvaluation",
        "Workload is pending evaluation in the scheduling queue",
    )


def test_reactivated_while_backing_off_reads_backoff_finished() -> None:
    """Kueue's workload controller words Requeued by the False reason it finds: stopped while
    backing off, the workload kept PodsReadyTimeout's, so its reactivation reads as the back-off
    over (task checks2; before, Reactivated)."""
    described, _ = both(STORIES["pods-ready timeout, stopped while backing off, reactivated"])
    assert described["Requeued"] == ("True", "BackoffFinished", "The workload backoff was finished")
