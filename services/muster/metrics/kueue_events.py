"""Kueue's counters and histograms from the admission engine's events: a pure mapping.

`KueueRecorder.record(events, facts_of)` returns the samples one round's events stand for
(`kueue_series.Sample`), in Kueue's semantics:

    QuotaReserved  quota_reserved_workloads_total, quota_reserved_wait_time_seconds (from
                   creation, or the last Requeued), for its ClusterQueue and LocalQueue
    Admitted       admitted_workloads_total, admission_wait_time_seconds,
                   admission_checks_wait_time_seconds (from QuotaReserved), the same per
                   LocalQueue, cohort_subtree_admitted_workloads_total for every cohort above
                   its ClusterQueue; multikueue_workloads_dispatched/admitted_total when it
                   was dispatched to a worker cluster (muster does both in one step)
    Evicted        evicted_workloads_total{reason,underlying_cause} (once_total the first
                   time per reason), per LocalQueue too, multikueue_workloads_evicted_total;
                   evicted for a rejected admission check and deactivated at once: reason
                   Deactivated, underlying_cause AdmissionCheck, as Kueue reports it
    Preempted      preempted_workloads_total{preempting_cluster_queue,reason}
    Finished       finished_workloads_total, execution_time_seconds (from first admission)

`attempt(events, seconds)` is the round's `admission_attempts_total` and duration. Times are
the events' own (the engine's clock), so the simulator and the service count alike. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from muster.core.events import Event, EventType
from muster.metrics.kueue_series import Sample

SUCCESS, INADMISSIBLE = "success", "inadmissible"
DEACTIVATED = "Deactivated"
ADMISSION_CHECK = "AdmissionCheck"


class WorkloadFacts(NamedTuple):
    """What the mapping needs to know of one workload, from the engine's record."""

    cluster_queue: str
    namespace: str
    local_queue: str  # its LocalQueue's name
    priority_class: str  # spec.priorityClassName, "" without one
    cohorts: tuple[str, ...]  # above its ClusterQueue, nearest first
    created_s: float  # its queue timestamp: creation, as the engine orders it
    worker_cluster: str = ""  # MultiKueue: where it was dispatched, "" if not


FactsOf = Callable[[str], WorkloadFacts | None]


class KueueRecorder:
    """The wait and run clocks of live workloads (what samples need beyond an event)."""

    def __init__(self) -> None:
        self._queued_s: dict[str, float] = {}  # created or requeued
        self._reserved_s: dict[str, float] = {}
        self._first_admitted_s: dict[str, float] = {}
        self._evicted_for: dict[str, set[tuple[str, str]]] = {}

    def record(self, events: Sequence[Event], facts_of: FactsOf) -> list[Sample]:
        """The samples `events` (one round's, in order) stand for."""
        out: list[Sample] = []
        for i, e in enumerate(events):
            key = e.object
            if e.type is EventType.REQUEUED:
                self._queued_s[key] = e.time
                continue
            if e.type is EventType.SUBMITTED:
                self._queued_s.setdefault(key, e.time)
                continue
            facts = facts_of(key)
            if facts is None:
                continue
            match e.type:
                case EventType.QUOTA_RESERVED:
                    out += self._reserved(e, facts)
                case EventType.ADMITTED:
                    out += self._admitted(e, facts)
                case EventType.EVICTED:
                    out += self._evicted(e, facts, deactivated=_deactivated_next(events, i))
                case EventType.PREEMPTED:
                    preemptor = facts_of(e.by)
                    if preemptor is not None:
                        labels = (preemptor.cluster_queue, e.reason)
                        out.append(Sample("kueue_preempted_workloads_total", labels))
                case EventType.FINISHED:
                    out += self._finished(e, facts)
        return out

    def attempt(self, events: Sequence[Event], seconds: float) -> list[Sample]:
        """One admission round that took `seconds`: success when it reserved quota."""
        reserved = any(e.type is EventType.QUOTA_RESERVED for e in events)
        result = (SUCCESS if reserved else INADMISSIBLE,)
        return [
            Sample("kueue_admission_attempts_total", result),
            Sample("kueue_admission_attempt_duration_seconds", result, seconds),
        ]

    def forget(self, key: str) -> None:
        """`key` is gone (finished or deleted): its clocks go too."""
        for clocks in (self._queued_s, self._reserved_s, self._first_admitted_s):
            clocks.pop(key, None)
        self._evicted_for.pop(key, None)

    def _since_queued(self, e: Event, facts: WorkloadFacts) -> float:
        return max(0.0, e.time - self._queued_s.get(e.object, facts.created_s))

    def _reserved(self, e: Event, f: WorkloadFacts) -> list[Sample]:
        self._reserved_s[e.object] = e.time
        wait = self._since_queued(e, f)
        cq, lq = (f.cluster_queue, f.priority_class), (f.local_queue, f.namespace, f.priority_class)
        return [
            Sample("kueue_quota_reserved_workloads_total", cq),
            Sample("kueue_quota_reserved_wait_time_seconds", cq, wait),
            Sample("kueue_local_queue_quota_reserved_workloads_total", lq),
            Sample("kueue_local_queue_quota_reserved_wait_time_seconds", lq, wait),
        ]

    def _admitted(self, e: Event, f: WorkloadFacts) -> list[Sample]:
        self._first_admitted_s.setdefault(e.object, e.time)
        wait = self._since_queued(e, f)
        checks = max(0.0, e.time - self._reserved_s.get(e.object, e.time))
        cq, lq = (f.cluster_queue, f.priority_class), (f.local_queue, f.namespace, f.priority_class)
        out = [
            Sample("kueue_admitted_workloads_total", cq),
            Sample("kueue_admission_wait_time_seconds", cq, wait),
            Sample("kueue_admission_checks_wait_time_seconds", cq, checks),
            Sample("kueue_local_queue_admitted_workloads_total", lq),
            Sample("kueue_local_queue_admission_wait_time_seconds", lq, wait),
            Sample("kueue_local_queue_admission_checks_wait_time_seconds", lq, checks),
        ]
        out += [
            Sample("kueue_cohort_subtree_admitted_workloads_total", (c, f.priority_class))
            for c in f.cohorts
        ]
        if f.worker_cluster:
            worker = (f.cluster_queue, f.worker_cluster)
            out.append(Sample("multikueue_workloads_dispatched_total", worker))
            out.append(Sample("multikueue_workloads_admitted_total", worker))
        return out

    def _evicted(self, e: Event, f: WorkloadFacts, *, deactivated: bool) -> list[Sample]:
        reason, _, cause = e.reason.partition("DueTo")  # Kueue's reason with its cause
        if deactivated and reason == ADMISSION_CHECK:
            reason, cause = DEACTIVATED, ADMISSION_CHECK
        cq = (f.cluster_queue, reason, cause, f.priority_class)
        out = [
            Sample("kueue_evicted_workloads_total", cq),
            Sample(
                "kueue_local_queue_evicted_workloads_total",
                (f.local_queue, f.namespace, reason, cause, f.priority_class),
            ),
        ]
        seen = self._evicted_for.setdefault(e.object, set())
        if (reason, cause) not in seen:
            seen.add((reason, cause))
            out.append(Sample("kueue_evicted_workloads_once_total", cq))
        if f.worker_cluster:
            worker = (f.cluster_queue, f.worker_cluster, reason)
            out.append(Sample("multikueue_workloads_evicted_total", worker))
        return out

    def _finished(self, e: Event, f: WorkloadFacts) -> list[Sample]:
        cq, lq = (f.cluster_queue, f.priority_class), (f.local_queue, f.namespace, f.priority_class)
        out = [
            Sample("kueue_finished_workloads_total", cq),
            Sample("kueue_local_queue_finished_workloads_total", lq),
        ]
        admitted_s = self._first_admitted_s.get(e.object)
        if admitted_s is not None:
            ran = max(0.0, e.time - admitted_s)
            out.append(Sample("kueue_execution_time_seconds", cq, ran))
            out.append(Sample("kueue_local_queue_execution_time_seconds", lq, ran))
        self.forget(e.object)
        return out


def _deactivated_next(events: Sequence[Event], i: int) -> bool:
    """Whether the event after `events[i]` deactivates the same workload (one step in Kueue)."""
    nxt = events[i + 1] if i + 1 < len(events) else None
    return nxt is not None and nxt.type is EventType.DEACTIVATED and nxt.object == events[i].object
