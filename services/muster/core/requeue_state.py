"""Kueue's status.requeueState of one workload, as each fact moves it. Pure.

The count (PodsReadyTimeout evictions since the workload was last deactivated) and requeueAt
(the instant it may queue again) are derived by three readers: the engine waits until
requeueAt, admission's ledger hands a rebuilt engine the count and a Retry's end, and the watcher
writes both to the Workload. Each calls these rules, so they cannot disagree.

Read in Kueue v0.19.2 (the same since v0.15): pkg/workload/workload.go `UpdateRequeueState`
and `SetRequeueState`, pkg/workload/admissionchecks.go `GetMaxRetryTime` and
`NeedsRequeueAtUpdate`, pkg/controller/core/workload_controller.go (requeueAt from Retry checks
before any eviction; requeueState cleared when the workload is deactivated).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from muster.api.model import RequeuingStrategy
from muster.core.conditions import PODS_READY_TIMEOUT, is_deactivation

if TYPE_CHECKING:
    from muster.core.config import Configuration


def count_after_eviction(count: int, reason: str, *, deactivated: bool = False) -> int:
    """requeueState.count after an eviction for `reason`: one more for a PodsReady timeout
    (UpdateRequeueState, at the eviction), none after a deactivation (the workload controller
    clears requeueState: a reactivated workload counts from zero), else as it was (a check's
    Retry counts nothing: SetRequeueState with incrementCount false). `deactivated`: the
    eviction deactivates it though its reason does not say so (admission's InactiveWorkload)."""
    if deactivated or is_deactivation(reason):
        return 0
    return count + 1 if reason == PODS_READY_TIMEOUT else count


def later(at_s: float | None, end_s: float | None) -> float | None:
    """requeueAt moved to `end_s` only if that is later (SetRequeueState: both the PodsReady
    timeout's back-off and a check's Retry write requeueAt, and neither may pull the other's
    earlier). When they overlap, the later end wins, whichever came first."""
    if end_s is None:
        return at_s
    return end_s if at_s is None or end_s > at_s else at_s


def backoff_seconds(count: int, base_s: int, max_s: int) -> int:
    """The back-off after the `count`th PodsReadyTimeout eviction: base*2^(count-1), capped
    (Kueue's requeuingStrategy, without its jitter: decisions replay byte for byte)."""
    return min(base_s << (max(count, 1) - 1), max_s)


def requeue_end_s(since_s: float, delay_s: float) -> float:
    """When a workload evicted at `since_s` may queue again after `delay_s`: Kueue's
    requeueState.requeueAt, a metav1.Time, so whole seconds (rounded down, as it is stored).
    Admission waits until this instant and the watcher writes it: one instant for both."""
    return float(math.floor(since_s + delay_s))


def backoff_end_s(count: int, evicted_at_s: float, strategy: RequeuingStrategy) -> float:
    """The end of the back-off of the `count`th PodsReadyTimeout eviction, made at
    `evicted_at_s` (UpdateRequeueState counts from the eviction, not from the pods' end)."""
    delay = backoff_seconds(count, strategy.backoff_base_seconds, strategy.backoff_max_seconds)
    return requeue_end_s(evicted_at_s, delay)


def retry_end_s(transitioned_s: float, after_s: float, *, now_s: float) -> float | None:
    """The requeueAt a check's Retry with requeueAfterSeconds `after_s` asks for, counted from
    its entry's lastTransitionTime `transitioned_s` (GetMaxRetryTime); None when it asks for
    none or that instant is not after `now_s` (NeedsRequeueAtUpdate sets no past time)."""
    if after_s <= 0:
        return None
    end_s = requeue_end_s(transitioned_s, after_s)
    return end_s if end_s > now_s else None


def retry_counts_waiting(config: Configuration, local_queue: str, check: str) -> bool:
    """Whether a check's Retry told while the workload holds no quota (waiting out a back-off,
    or queued for quota) moves its requeueAt: when the ClusterQueue serving its LocalQueue
    (`namespace/name`) names the check now. Kueue keeps a workload's status.admissionChecks
    in line with its ClusterQueue's, so a check removed from it has no state to be in Retry.
    The engine and admission's ledger both ask this, with the configuration of the instant
    the Retry is told, so a rebuilt replica waits exactly as the live one did."""
    lq = config.local_queues.get(local_queue)
    return lq is not None and config.names_check(lq.cluster_queue, check)


def reactivated_retry_end_s(
    retry_ends: Mapping[str, float], counts: Callable[[str], bool], *, now_s: float
) -> float | None:
    """requeueAt for a workload reactivated at `now_s` (None: none). Kueue clears requeueState
    while a workload is inactive, but not status.admissionChecks; once it is active again
    NeedsRequeueAtUpdate sets requeueAt from the Retry checks it finds there (GetMaxRetryTime:
    the latest lastTransitionTime + requeueAfterSeconds), if that is still to come. So a Retry
    told while it was inactive (or before, if no eviction reset it since) holds it out until
    then. `retry_ends`: those ends, of the checks still in Retry; `counts`: whether its
    ClusterQueue names the check now (`retry_counts_waiting`)."""
    end_s = max((s for check, s in retry_ends.items() if counts(check)), default=None)
    return end_s if end_s is not None and end_s > now_s else None
