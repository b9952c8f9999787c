"""Kueue's words on a Workload: condition types, and the reasons and messages the engine
gives that callers (the gateway's workload book) must spell exactly as it does."""

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"
REQUEUED = "Requeued"
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
BACKOFF_FINISHED = "BackoffFinished"
BACKOFF_FINISHED_MESSAGE = "The workload backoff was finished"
REQUEUING_LIMIT_EXCEEDED = "DeactivatedDueToRequeuingLimitExceeded"

REQUEUING_LIMIT_MESSAGE = (
    "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
)


def is_deactivation(reason: str) -> bool:
    """Whether an eviction of `reason` deactivates the workload (Kueue's "Deactivated" with
    its cause: DeactivatedDueTo<cause>): it stays out of its queue once its pods are gone
    (docs/events.md's reader rule, read alike by admission, the gateway, the watcher and
    `muster run`)."""
    return reason.startswith(DEACTIVATED)
