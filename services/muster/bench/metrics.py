"""Admission metrics of one run, computed only from its events and the generator's plan.

Holding quota: a workload holds its cpu in its ClusterQueue, and so in its cohort, from a
QuotaReserved event until its next Evicted, Deactivated or Finished event. Waiting: from its
planned arrival, and again from each Requeued event, until its next QuotaReserved.

Mean usage while work is waiting: for each cohort, the time-weighted mean of (cpu its members
hold / their summed nominal cpu) over the time during which at least one of its workloads is
waiting; then the plain mean over the cohorts that ever waited (None if none did). The state
that counts for an interval is the one after every event of the instant that starts it, so
an arrival admitted at once never counts as waiting. Cohorts rather than ClusterQueues,
because a ClusterQueue may borrow its neighbours' idle quota: a cohort that is full while work
waits is what "usage >= 90 % of nominal while work is waiting" asks for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from muster.bench.kueue_perf import PlannedWorkload
from muster.core.events import Event, EventType

RELEASES = frozenset({EventType.EVICTED, EventType.DEACTIVATED, EventType.FINISHED})
ENDS = frozenset({EventType.DEACTIVATED, EventType.FINISHED})


class ClassWaits(msgspec.Struct, frozen=True, kw_only=True):
    """Time to first QuotaReserved (virtual seconds) of one class's admitted workloads."""

    workloads: int  # planned
    admitted: int  # with at least one QuotaReserved
    mean_s: float | None  # None when none was admitted
    p50_s: float | None
    p99_s: float | None
    max_s: float | None


class AdmissionMetrics(msgspec.Struct, frozen=True, kw_only=True):
    admissions: int  # QuotaReserved events, re-admissions after eviction included
    preemptions: int  # Preempted events
    finished: int  # Finished events
    makespan_s: float  # virtual time of the last event (0 with none)
    waits: Mapping[str, ClassWaits]  # class -> waits, classes in first-planned order
    mean_usage_while_waiting: float | None  # fraction of nominal, see the module docstring
    max_usage: float  # highest cohort usage / nominal after any event


@dataclass(slots=True)
class CohortLedger:
    """Running state of one cohort; `advance` integrates usage up to a time."""

    nominal_milli: int
    reserved_milli: int = 0
    waiting: int = 0
    since_s: float = 0.0
    waiting_s: float = 0.0  # total time with at least one workload waiting
    usage_s: float = 0.0  # integral of reserved / nominal over that time

    def advance(self, now_s: float) -> None:
        if self.waiting > 0:
            span_s = now_s - self.since_s
            self.waiting_s += span_s
            self.usage_s += self.reserved_milli / self.nominal_milli * span_s
        self.since_s = now_s

    def usage(self) -> float:
        return self.reserved_milli / self.nominal_milli


def measure(
    events: Sequence[Event],
    workloads: Sequence[PlannedWorkload],
    *,
    cohort_nominal_milli: Mapping[str, int],
) -> AdmissionMetrics:
    """Every admission metric of one run; events about unplanned workloads are ignored.

    `events` must be in the order they happened, as `SimulationResult.events` is.
    """
    planned: dict[str, PlannedWorkload] = {wl.key: wl for wl in workloads}
    first_reserved_s: dict[str, float] = {}
    counts = dict.fromkeys((EventType.QUOTA_RESERVED, EventType.PREEMPTED, EventType.FINISHED), 0)
    for event in events:
        if event.type in counts:
            counts[event.type] += 1
        if event.type is EventType.QUOTA_RESERVED and event.object in planned:
            first_reserved_s.setdefault(event.object, event.time)
    mean_usage, max_usage = cohort_usage(events, workloads, cohort_nominal_milli)
    return AdmissionMetrics(
        admissions=counts[EventType.QUOTA_RESERVED],
        preemptions=counts[EventType.PREEMPTED],
        finished=counts[EventType.FINISHED],
        makespan_s=events[-1].time if events else 0.0,
        waits=class_waits(workloads, first_reserved_s),
        mean_usage_while_waiting=mean_usage,
        max_usage=max_usage,
    )


def class_waits(
    workloads: Sequence[PlannedWorkload], first_reserved_s: Mapping[str, float]
) -> dict[str, ClassWaits]:
    """Waits per class, from each workload's arrival to its first QuotaReserved."""
    planned: dict[str, int] = {}
    waits: dict[str, list[float]] = {}
    for wl in workloads:
        planned[wl.workload_class] = planned.get(wl.workload_class, 0) + 1
        samples = waits.setdefault(wl.workload_class, [])
        reserved_s = first_reserved_s.get(wl.key)
        if reserved_s is not None:
            samples.append(reserved_s - wl.arrival_s)
    return {name: summarize(waits[name], workloads=count) for name, count in planned.items()}


def summarize(samples: Iterable[float], *, workloads: int) -> ClassWaits:
    ordered = sorted(samples)
    if not ordered:
        return ClassWaits(
            workloads=workloads, admitted=0, mean_s=None, p50_s=None, p99_s=None, max_s=None
        )
    return ClassWaits(
        workloads=workloads,
        admitted=len(ordered),
        mean_s=math.fsum(ordered) / len(ordered),
        p50_s=percentile(ordered, 50),
        p99_s=percentile(ordered, 99),
        max_s=ordered[-1],
    )


def percentile(ordered: Sequence[float], p: float) -> float:
    """The nearest-rank `p`-th percentile of sorted, non-empty `ordered`: no interpolation."""
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def cohort_usage(
    events: Sequence[Event],
    workloads: Sequence[PlannedWorkload],
    cohort_nominal_milli: Mapping[str, int],
) -> tuple[float | None, float]:
    """(mean usage while waiting, max usage), both as fractions of the cohort's nominal cpu."""
    planned: dict[str, PlannedWorkload] = {wl.key: wl for wl in workloads}
    ledgers = {name: CohortLedger(nominal) for name, nominal in cohort_nominal_milli.items()}
    arrivals = sorted(workloads, key=lambda wl: wl.arrival_s)  # stable: plan order on ties
    holding: set[str] = set()
    waiting: set[str] = set()
    max_usage = 0.0
    next_arrival = 0

    def arrive_until(time_s: float) -> None:
        nonlocal next_arrival
        while next_arrival < len(arrivals) and arrivals[next_arrival].arrival_s <= time_s:
            wl = arrivals[next_arrival]
            next_arrival += 1
            ledger = ledgers[wl.cohort]
            ledger.advance(wl.arrival_s)
            waiting.add(wl.key)
            ledger.waiting += 1

    for event in events:
        arrive_until(event.time)
        wl = planned.get(event.object)
        if wl is None:
            continue
        ledger = ledgers[wl.cohort]
        ledger.advance(event.time)
        if event.type is EventType.QUOTA_RESERVED:
            stop_waiting(wl.key, ledger, waiting)
            if wl.key not in holding:
                holding.add(wl.key)
                ledger.reserved_milli += wl.cpu_milli
                max_usage = max(max_usage, ledger.usage())
        elif event.type is EventType.REQUEUED and wl.key not in waiting:
            waiting.add(wl.key)
            ledger.waiting += 1
        elif event.type in RELEASES:
            if wl.key in holding:
                holding.remove(wl.key)
                ledger.reserved_milli -= wl.cpu_milli
            if event.type in ENDS:
                stop_waiting(wl.key, ledger, waiting)
    arrive_until(math.inf)
    end_s = max(events[-1].time if events else 0.0, arrivals[-1].arrival_s if arrivals else 0.0)
    for ledger in ledgers.values():
        ledger.advance(end_s)
    means = [ledger.usage_s / ledger.waiting_s for ledger in ledgers.values() if ledger.waiting_s]
    mean = math.fsum(means) / len(means) if means else None
    return mean, max_usage


def stop_waiting(key: str, ledger: CohortLedger, waiting: set[str]) -> None:
    if key in waiting:
        waiting.remove(key)
        ledger.waiting -= 1
