"""How a Workload's conditions and requeueState move on each admission, eviction or end event,
as Kueue's workload controller and job reconciler word them. Pure functions of a
`WorkloadRecord`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from muster.api.model import RequeuingStrategy
from muster.contracts.v1 import events_pb2 as pb
from muster.core.conditions import (
    ADMISSION_CHECK,
    ADMITTED_MESSAGE,
    NOT_READY_MESSAGE,
    PENDING_EVALUATION,
    PENDING_EVALUATION_MESSAGE,
    PODS_READY_TIMEOUT,
    QUOTA_RESERVED,
    REACTIVATED,
    STILL_STOPPED,
    WAIT_FOR_START,
    deactivated,
    deactivated_reason,
    finished_reason,
    is_deactivation,
    not_admitted,
    pods_gone,
    previously,
    quota_reserved_message,
    requeued_when_queued,
    restarted,
)
from muster.core.requeue_state import (
    backoff_end_s,
    count_after_eviction,
    later,
    reactivated_retry_end_s,
    retry_end_s,
)
from muster.watcher.kueue_status.followed import DEACTIVATED_BY_ADMISSION
from muster.watcher.kueue_status.workload import WorkloadRecord

# Admitted False while it holds no quota, next to any QuotaReserved False (Kueue's
# UnadmittedWorkloadsObservability, on by default: `granular`).
NO_RESERVATION: Final = not_admitted(reserved=False)


def transition(
    wl: WorkloadRecord,
    field: str,
    payload: Any,
    *,
    at_s: float,
    granular: bool,
    counts: Callable[[str], bool],
) -> None:
    """Move `wl` on for one admission, eviction or end event, as Kueue words the conditions.
    `counts`: whether its ClusterQueue names a check now (`QueueBook.names_check`)."""
    if field == "pending":
        # Kueue's reasons as admission decided them (granular since Kueue v0.19).
        reason = payload.reason or "Pending"
        wl.state = "pending"
        wl.unadmit()
        wl.set("QuotaReserved", False, reason, payload.message)
        if granular:
            wl.say([NO_RESERVATION])
        if reason not in STILL_STOPPED:
            _restarted(wl)
    elif field == "quota_reserved" and wl.state == "admitted":
        pass  # stored after its admitted (docs/events.md, "Order"): said already
    elif field in ("quota_reserved", "admitted"):
        _reserved(wl, field, payload, granular=granular)
    elif field == "evicted":
        _evicted(wl, payload, at_s=at_s, granular=granular)
    elif field == "eviction_completed":
        if wl.state == "reserving" and wl.conditions.get("Evicted", {}).get("status") == "True":
            _stopped(wl, granular=granular)
    elif field == "requeued":
        held = payload.reason == REACTIVATED and _held_out(wl, counts, at_s=at_s)
        _requeued(wl, payload, granular=granular, held=held)
    elif field == "finished":
        wl.state = "finished"
        reason = finished_reason(succeeded=bool(payload.succeeded), reason=payload.reason)
        wl.set("Finished", True, reason, payload.message)


def requeue_state(
    wl: WorkloadRecord,
    field: str,
    payload: Any,
    *,
    at_s: float,
    requeuing: RequeuingStrategy,
    counts: Callable[[str], bool],
) -> None:
    """Kueue's status.requeueState by `core.requeue_state`'s rules, the ones admission's
    ledger and engine count and wait by: each PodsReadyTimeout eviction counts one and ends
    its back-off from the eviction; a check's Retry eviction ends at the Retry's end
    (`StatusBook._retry`); requeueAt only ever moves later, and is cleared when it queues
    again; a deactivation clears both (Kueue's workload controller, which starts a reactivated
    workload's count over); reactivated, the Retry ends of the checks its ClusterQueue names
    (`counts`) set requeueAt."""
    if field == "evicted":
        wl.requeue_count = count_after_eviction(
            wl.requeue_count, payload.reason, deactivated=wl.state == "inactive"
        )
        if payload.reason == PODS_READY_TIMEOUT:
            end_s = backoff_end_s(wl.requeue_count, at_s, requeuing)
            wl.requeue_at_s = later(wl.requeue_at_s, end_s)
        elif payload.reason == ADMISSION_CHECK:
            wl.requeue_at_s = later(wl.requeue_at_s, wl.retry_at_s)
    deactivated = field == "evicted" and is_deactivation(payload.reason)
    if wl.state == "inactive" or deactivated:  # at once, though its pods may still run
        wl.requeue_count, wl.requeue_at_s, wl.retry_at_s = 0, None, None
    elif field == "requeued" and payload.reason == REACTIVATED:
        wl.requeue_at_s = reactivated_retry_end_s(wl.retry_ends, counts, now_s=at_s)
    elif field == "requeued":
        wl.requeue_at_s = None
    if field in ("evicted", "requeued"):
        wl.retry_at_s = None  # a Retry before the eviction counts only for that eviction
    if field in ("evicted", "quota_reserved", "admitted"):
        wl.retry_ends = {}  # checks reset, or the told ones spent by a reservation


def keep_retry_end(wl: WorkloadRecord, check: pb.AdmissionCheckUpdated, since_s: float) -> None:
    """A check told while `wl` holds no quota to decide on (or its pods stop): a Retry's end
    counts at its reactivation for as long as the check stays in Retry (GetMaxRetryTime)."""
    evicted = wl.conditions.get("Evicted", {}).get("status") == "True"
    if wl.state in ("reserving", "admitted") and not evicted:
        return
    wl.retry_ends.pop(check.check, None)
    if check.state == "Retry":
        end_s = retry_end_s(since_s, check.requeue_after_seconds, now_s=since_s)
        if end_s is not None:
            wl.retry_ends[check.check] = end_s


def _reserved(wl: WorkloadRecord, field: str, payload: Any, *, granular: bool) -> None:
    cq = payload.admission.cluster_queue
    _restarted(wl)  # reserved again: its queue runs
    wl.admit(payload.admission)
    wl.set("QuotaReserved", True, "QuotaReserved", quota_reserved_message(cq))
    evicted = wl.conditions.get("Evicted")
    if evicted is not None and evicted["status"] == "True":
        wl.set("Evicted", False, "QuotaReserved", previously(evicted["message"]))
    if field == "admitted":
        wl.state = "admitted"
        wl.set("Admitted", True, "Admitted", ADMITTED_MESSAGE)
    else:
        wl.state = "reserving"
        checks = tuple(sorted(payload.admission_checks))
        if checks or wl.checks is not None:
            wl.checks = checks
        if checks and granular:  # Kueue's SyncAdmittedCondition: checks not all Ready yet
            wl.say([not_admitted(reserved=True)])


def _evicted(wl: WorkloadRecord, payload: Any, *, at_s: float, granular: bool) -> None:
    """Evicted True (Kueue's workload controller). QuotaReserved and Admitted stay as they
    were while its pods stop (`_stopped`), except for a deactivation admission carried out
    at once (its quota given back: nothing ran, or the back-off limit was reached)."""
    wl.evicted_at_s = at_s
    wl.answers.clear()  # reset with the others; the next reservation is answered anew
    # Kueue's prepareForEviction (resetClusterNomination, pkg/workload/evict/evict.go): any
    # eviction, a deactivation too, unsets clusterName at once, though the pods still stop.
    wl.cluster_name = ""
    reason = payload.reason or "Evicted"
    if reason == DEACTIVATED_BY_ADMISSION:
        evicted = wl.conditions.get("Evicted", {})
        reason = deactivated_reason(
            evicted.get("reason", "") if evicted.get("status") == "True" else ""
        )
        wl.set("Evicted", True, reason, payload.message)
        _inactive(wl, granular=granular)
        return
    wl.set("Evicted", True, reason, payload.message)
    wl.state = "reserving"  # the quota stays reserved until the pods are gone


def _stopped(wl: WorkloadRecord, *, granular: bool) -> None:
    """Its pods are gone (Kueue's job reconciler, once the job is not active): the
    reservation is cleared, Requeued says whether it queues at once, with the eviction's
    reason and message; a deactivated one stays out of its queue."""
    evicted = wl.conditions["Evicted"]
    if is_deactivation(evicted["reason"]):
        _inactive(wl, granular=granular)
        return
    wl.state = "pending"
    wl.unadmit()
    pending = bool(wl.checks) and not granular  # said only with the classic reasons
    wl.say(
        pods_gone(evicted["reason"], evicted["message"], granular=granular, checks_pending=pending)
    )


def _held_out(wl: WorkloadRecord, counts: Callable[[str], bool], *, at_s: float) -> bool:
    """Whether a Retry told while `wl` was inactive holds it out once reactivated at `at_s`."""
    return reactivated_retry_end_s(wl.retry_ends, counts, now_s=at_s) is not None


def _requeued(wl: WorkloadRecord, payload: Any, *, granular: bool, held: bool) -> None:
    """Admission queued it again. Kueue's workload controller says why: reactivated, its
    back-off over; a workload evicted by a stopped queue stays Requeued False until the
    queue runs again (`_restarted`). `held`: reactivated but held out until a Retry's end;
    Requeued stays as it is until then (Kueue's controller waits for requeueAt first), and
    the `requeued` at the end says Reactivated (`requeued_when_queued`)."""
    if wl.state == "reserving" and wl.conditions.get("Evicted", {}).get("status") == "True":
        _stopped(wl, granular=granular)  # no eviction_completed came (nothing ran)
    wl.state = "pending"
    wl.unadmit()
    if granular:  # as Kueue's workload controller resets it for the scheduler
        pending = (QUOTA_RESERVED, False, PENDING_EVALUATION, PENDING_EVALUATION_MESSAGE)
        wl.say([pending, NO_RESERVATION])
    was = wl.conditions.get("Requeued", {})
    words = requeued_when_queued(
        was.get("status", ""), was.get("reason", ""), was.get("message", ""), payload.reason
    )
    if words is not None and not held:
        wl.set("Requeued", True, *words)


def _restarted(wl: WorkloadRecord) -> None:
    """Kueue's workload controller: Requeued True once the stopped queue that evicted the
    workload runs again; muster sees it as a pending reason other than a stop's, or a
    reservation."""
    was = wl.conditions.get("Requeued", {})
    words = restarted(was.get("status", ""), was.get("reason", ""))
    if words is not None:
        wl.set("Requeued", True, *words)


def waiting_for_start(wl: WorkloadRecord) -> None:
    """PodsReady False, WaitForStart, unless it is admitted with its pods ready: a workload
    not admitted (yet, or no more: evicted, requeued) waits for its pods to start anew. A
    finished one keeps what it had (Kueue stops looking at a finished job's readiness)."""
    ready = wl.conditions.get("PodsReady", {}).get("status") == "True"
    if wl.state == "finished" or (wl.state == "admitted" and ready):
        return
    wl.set("PodsReady", False, WAIT_FOR_START, NOT_READY_MESSAGE)


def _inactive(wl: WorkloadRecord, *, granular: bool) -> None:
    """Deactivated, its quota given back (`core.conditions.deactivated`)."""
    evicted = wl.conditions["Evicted"]
    wl.state = "inactive"
    wl.unadmit()
    pending = bool(wl.checks) and not granular
    wl.say(
        deactivated(
            evicted["reason"], evicted["message"], granular=granular, checks_pending=pending
        )
    )
