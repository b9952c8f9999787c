"""The events a cluster's Kueue statuses are folded from (the status task follows these), and
the eviction reason admission gives a deactivation."""

from __future__ import annotations

from typing import Final

# The events whose payloads change a Workload's status (the status task follows these).
WORKLOAD_EVENTS = (
    "submitted",
    "pending",
    "quota_reserved",
    "admitted",
    "evicted",
    "requeued",
    "finished",
    "deleted",
)
# The watcher's reports of a workload's readiness (followed only with waitForPodsReady on).
READINESS_EVENTS = ("running", "pods_ready")
# spec.active set (kueuectl, the gateway, the watcher): a pending workload deactivated is told
# by nothing else (admission takes it off its queue without a decision to publish).
ACTIVE_CHANGED: Final = "active_changed"
# The binder's word that an evicted workload's pods are gone: a deactivated one reserves
# nothing from then on.
EVICTION_COMPLETED: Final = "eviction_completed"
# The watcher's word that a workload's reclaimable pods changed: written on a Job's Workload.
RECLAIMABLE_PODS: Final = "reclaimable_pods"

DEACTIVATED_BY_ADMISSION = "InactiveWorkload"  # admission's eviction reason for a deactivation
