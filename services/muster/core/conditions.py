"""Kueue's words on a Workload: condition types, and the reasons and messages the engine
gives that callers (the gateway's workload book) must spell exactly as it does."""

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"
REQUEUED = "Requeued"
# Finished's reasons: Kueue's workload controller says Succeeded or Failed from the Job; its
# job framework says FailedToStart when a start can never succeed (a conflicting podSetUpdate).
SUCCEEDED = "Succeeded"
SUCCEEDED_MESSAGE = "Job finished successfully"  # Kueue's, when its Job completes
FAILED = "Failed"
FAILED_TO_START = "FailedToStart"
FINISHED_REASONS = frozenset({SUCCEEDED, FAILED, FAILED_TO_START})
PODS_READY = "PodsReady"
WAITING_FOR_VICTIMS = "WaitingForPreemptedWorkloads"
PENDING_PREEMPTION = (
    ". Pending the preemption of"  # Kueue: "<why>. Pending the preemption of N workload(s)"
)
NO_LONGER_FITS = "Workload no longer fits after processing another workload"  # Kueue's words
DEACTIVATED = "Deactivated"
DEACTIVATED_MESSAGE = "The workload is deactivated"
# PodsReady's reasons and messages as Kueue's job reconciler writes them (jobframework's
# generatePodsReadyCondition; Kueue's WorkloadWaitForStart, ...): waiting for the first start
# (and whenever it is not admitted), started, then after the start a pod lost readiness and
# all regained it. The engine, the gateway and the watcher all say these.
WAIT_FOR_START = "WaitForStart"
NOT_READY_MESSAGE = "Not all pods are ready or succeeded"
STARTED = "Started"
READY_MESSAGE = "All pods reached readiness and the workload is running"
WAIT_FOR_RECOVERY = "WaitForRecovery"
WAIT_FOR_RECOVERY_MESSAGE = "At least one pod has failed, waiting for recovery"
RECOVERED = "Recovered"
# Requeued (Kueue's workload controller): the back-off after a PodsReady timeout or a check's
# Retry is over; past backoffLimitCount a workload is deactivated instead, its eviction's reason
# "Deactivated" with that cause (Kueue's patching.ReasonWithCause).
PODS_READY_TIMEOUT = "PodsReadyTimeout"  # the eviction's reason; counted (requeueState.count)
ADMISSION_CHECK = "AdmissionCheck"  # the eviction's reason at a check's Retry
BACKOFF_FINISHED = "BackoffFinished"
BACKOFF_FINISHED_MESSAGE = "The workload backoff was finished"
REQUEUING_LIMIT_EXCEEDED = "DeactivatedDueToRequeuingLimitExceeded"

REQUEUING_LIMIT_MESSAGE = (
    "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
)
# Through an eviction, as Kueue's workload controller and job reconciler word it (what
# `kubectl describe workload` shows; the watcher writes these, the gateway's book shows them).
ADMITTED_MESSAGE = "The workload is admitted"
PENDING_EVALUATION = "PendingEvaluation"  # QuotaReserved False, granular reasons on
PENDING_EVALUATION_MESSAGE = "Workload is pending evaluation in the scheduling queue"
NO_RESERVATION = "NoReservation"  # Admitted False once the reservation is cleared
NO_RESERVATION_MESSAGE = "The workload has no reservation"
UNSATISFIED_CHECKS = "UnsatisfiedAdmissionChecks"  # Admitted False: reserved, checks not ready
UNSATISFIED_CHECKS_MESSAGE = "The workload has not all checks ready"
REACTIVATED = "Reactivated"
REACTIVATED_MESSAGE = "The workload was reactivated"
# Evicted for these, a workload is Requeued True as soon as its pods are gone; for the others
# Requeued stays False until the workload controller queues it again.
REQUEUED_AT_ONCE = ("Preempted", "NodeFailures")
# Requeued False for these until the back-off (requeueAt) has passed: then BackoffFinished.
BACKING_OFF = (PODS_READY_TIMEOUT, ADMISSION_CHECK)
# Requeued False for these until the queue is no longer stopped: then <Kind>Restarted.
RESTARTED = {
    "ClusterQueueStopped": (
        "ClusterQueueRestarted",
        "The ClusterQueue was restarted after being stopped",
    ),
    "LocalQueueStopped": (
        "LocalQueueRestarted",
        "The LocalQueue was restarted after being stopped",
    ),
}
STILL_STOPPED = ("Suspended", "Inadmissible")  # pending reasons of a stopped queue


def is_deactivation(reason: str) -> bool:
    """Whether an eviction of `reason` deactivates the workload (Kueue's "Deactivated" with
    its cause: DeactivatedDueTo<cause>): it stays out of its queue once its pods are gone
    (docs/events.md's reader rule, read alike by admission, the gateway, the watcher and
    `muster run`)."""
    return reason.startswith(DEACTIVATED)


def quota_reserved_message(cluster_queue: str) -> str:
    return f"Quota reserved in ClusterQueue {cluster_queue}"


def previously(message: str) -> str:
    """Evicted False's message once reserved again (Kueue: "Previously: <eviction's>")."""
    return f"Previously: {message}"


def deactivated_reason(evicted_before: str) -> str:
    """Kueue's eviction reason for a deactivation admission decides by itself (its
    `InactiveWorkload`): "Deactivated" with its cause (patching.ReasonWithCause). Admission
    does so when a check Rejected a workload that only reserved quota, and in streams written
    before November 2026 when the back-off limit was reached (`evicted_before`, the eviction
    still in force, was at the PodsReady timeout; now that eviction says the cause itself)."""
    if evicted_before == PODS_READY_TIMEOUT:
        return REQUEUING_LIMIT_EXCEEDED
    return "DeactivatedDueToAdmissionCheck"


def requeued_when_queued(
    was_status: str, was_reason: str, was_message: str, requeued_reason: str
) -> tuple[str, str] | None:
    """Requeued True's (reason, message) once admission queues the workload again (a
    `requeued` of `requeued_reason`), given its Requeued condition until then; None leaves it
    as it is: True already (preempted), absent (it never held quota), or False until its
    stopped queue runs again. Kueue's workload controller words it by the False reason, not
    by why it is queued: back-off over after a PodsReady timeout or a check's Retry, though
    it was deactivated and reactivated meanwhile (the deactivation found it evicted already);
    Reactivated after a deactivation, also when a Retry held the reactivated workload out
    until its end (queued then by a `BackoffFinished`)."""
    if was_status != "False" or was_reason in RESTARTED:
        return None
    if was_reason in BACKING_OFF:
        return BACKOFF_FINISHED, BACKOFF_FINISHED_MESSAGE
    if requeued_reason == REACTIVATED or is_deactivation(was_reason):
        return REACTIVATED, REACTIVATED_MESSAGE
    return was_reason, was_message  # evicted for a reason of muster's own: queued at once


def restarted(was_status: str, was_reason: str) -> tuple[str, str] | None:
    """Requeued True's (reason, message) once the stopped queue that evicted the workload runs
    again (muster sees a pending reason other than a stop's, or a reservation); else None."""
    return RESTARTED.get(was_reason) if was_status == "False" else None


Said = tuple[str, bool, str, str]  # a condition as written: type, status, reason, message


def not_admitted(*, reserved: bool) -> Said:
    """Admitted False while a workload waits, as Kueue's SyncAdmittedCondition writes it with
    UnadmittedWorkloadsObservability on (its default) once QuotaReserved is set: no reservation,
    or quota reserved and its admission checks not all Ready. With the gate off Kueue writes
    nothing for a workload never admitted."""
    if reserved:
        return ADMITTED, False, UNSATISFIED_CHECKS, UNSATISFIED_CHECKS_MESSAGE
    return ADMITTED, False, NO_RESERVATION, NO_RESERVATION_MESSAGE


def unreserved(reason: str, message: str, *, checks_pending: bool = False) -> list[Said]:
    """Kueue's UnsetQuotaReservationWithCondition, and the Admitted condition it syncs
    (SyncAdmittedCondition): `checks_pending`, its checks reset by the eviction and not all
    ready, is said only with the classic reasons (UnadmittedWorkloadsObservability off)."""
    if checks_pending:
        why = "The workload has no reservation and not all checks ready"
        admitted: Said = (ADMITTED, False, "NoReservationUnsatisfiedChecks", why)
    else:
        admitted = (ADMITTED, False, NO_RESERVATION, NO_RESERVATION_MESSAGE)
    return [(QUOTA_RESERVED, False, reason, message), admitted]


def pods_gone(
    evicted_reason: str, evicted_message: str, *, granular: bool, checks_pending: bool = False
) -> list[Said]:
    """An evicted workload's pods are gone (Kueue's job reconciler): its reservation is
    cleared, and Requeued says with the eviction's words whether it queues again at once."""
    reason = PENDING_EVALUATION if granular else "Pending"
    at_once = evicted_reason in REQUEUED_AT_ONCE
    return [
        *unreserved(reason, evicted_message, checks_pending=checks_pending),
        (REQUEUED, at_once, evicted_reason, evicted_message),
    ]


def deactivated(
    evicted_reason: str, evicted_message: str, *, granular: bool, checks_pending: bool = False
) -> list[Said]:
    """Deactivated, its quota given back: Requeued False with the eviction's words, and
    QuotaReserved as Kueue's workload controller keeps it for an inactive workload."""
    if granular:
        reason, message = DEACTIVATED, DEACTIVATED_MESSAGE
    else:
        reason, message = "Pending", evicted_message
    return [
        *unreserved(reason, message, checks_pending=checks_pending),
        (REQUEUED, False, evicted_reason, evicted_message),
    ]


CONDITION_MESSAGE_MAX_BYTES = 32 * 1024  # what the API server takes in a condition's message


def condition_message(message: str) -> str:
    """`message` as a condition may hold it: cut past 32 KiB, ending " ...", as Kueue's
    TruncateConditionMessage cuts it (a pending message naming 10 000 resources is 500 KiB,
    and the API server refuses the whole status write for it)."""
    data = message.encode()
    if len(data) <= CONDITION_MESSAGE_MAX_BYTES:
        return message
    return data[: CONDITION_MESSAGE_MAX_BYTES - 4].decode(errors="ignore") + " ..."


def finished_reason(*, succeeded: bool, reason: str = "") -> str:
    """The Finished condition's reason for a `finished` saying `succeeded` and `reason` (its
    `WorkloadFinished.reason`; empty in events written before it existed). A reason other
    than Kueue's reads as empty: the API server refuses a status whose reason is not a word,
    and a stored event must never stop the watcher's writes."""
    if reason in FINISHED_REASONS:
        return reason
    return SUCCEEDED if succeeded else FAILED
