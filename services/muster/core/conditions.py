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
