"""Kueue's Prometheus series, by the names, types and labels of Kueue's `pkg/metrics`.

Every series carries `replica_role` last, as Kueue's do (an admission replica is the `leader`
of the cohort trees whose shard lease it holds; a replica waiting for a lease exports nothing).
`SERIES` lists them with the labels that come before it; `KueueSeries` makes them in a
registry and takes samples (`Sample`, from `kueue_events`) and gauge snapshots (`Gauges`, from
`kueue_gauges`).

Differs from Kueue: Kueue exports the LocalQueue family behind its `LocalQueueMetrics` gate,
the cohort family behind `MetricsForCohorts` and the quota family behind
`metrics.enableClusterQueueResources`; muster always exports them (each is one series per
queue, flavor and resource: the cardinality of the configuration, not of the workloads).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final, Literal, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LEADER: Final = "leader"
CQ: Final = "cluster_queue"
PC: Final = "priority_class"
LQ: Final = ("name", "namespace")
QUOTA: Final = ("cohort", CQ, "flavor", "resource")


def wait_buckets(count: int) -> tuple[float, ...]:
    """Kueue's wait-time buckets: 1 s, then 2.5 s doubling (`count` in all)."""
    return (1.0, *(2.5 * 2**i for i in range(count - 1)))


Kind = Literal["counter", "gauge", "histogram"]


class Series(NamedTuple):
    name: str
    kind: Kind
    labels: tuple[str, ...]  # replica_role follows
    help: str
    buckets: tuple[float, ...] = ()


_WAIT = wait_buckets(14)
_LONG = wait_buckets(16)
_ATTEMPT = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)  # Prometheus' defaults

SERIES: Final[tuple[Series, ...]] = (
    # Health
    Series("kueue_admission_attempts_total", "counter", ("result",),
           "Admission rounds; result success when the round reserved quota for a workload."),
    Series("kueue_admission_attempt_duration_seconds", "histogram", ("result",),
           "Time an admission round took to decide.", _ATTEMPT),
    Series("multikueue_workloads_dispatched_total", "counter", (CQ, "cluster"),
           "Workloads sent to a worker cluster (MultiKueue)."),
    Series("multikueue_workloads_admitted_total", "counter", (CQ, "cluster"),
           "Workloads admitted on a worker cluster (MultiKueue); again after a re-admission."),
    Series("multikueue_workloads_evicted_total", "counter", (CQ, "cluster", "reason"),
           "Workloads evicted from a worker cluster (MultiKueue)."),
    Series("multikueue_cluster_status", "gauge", (CQ, "cluster", "active"),
           "1 for the state (active True or False) of each worker cluster of a ClusterQueue."),
    # ClusterQueue
    Series("kueue_pending_workloads", "gauge", (CQ, "status"),
           "Pending workloads: active (will be tried) or inadmissible (wait for a change)."),
    Series("kueue_quota_reserved_workloads_total", "counter", (CQ, PC),
           "Quota reservations, per ClusterQueue."),
    Series("kueue_quota_reserved_wait_time_seconds", "histogram", (CQ, PC),
           "From creation or requeue until quota was reserved.", _WAIT),
    Series("kueue_admitted_workloads_total", "counter", (CQ, PC),
           "Admissions, per ClusterQueue."),
    Series("kueue_admission_wait_time_seconds", "histogram", (CQ, PC),
           "From creation or requeue until admission.", _LONG),
    Series("kueue_admission_checks_wait_time_seconds", "histogram", (CQ, PC),
           "From quota reservation until admission (the admission checks).", _WAIT),
    Series("kueue_admitted_active_workloads", "gauge", (CQ,),
           "Admitted workloads that are active, per ClusterQueue."),
    Series("kueue_reserving_active_workloads", "gauge", (CQ,),
           "Workloads holding quota, per ClusterQueue."),
    Series("kueue_evicted_workloads_total", "counter", (CQ, "reason", "underlying_cause", PC),
           "Evictions, per ClusterQueue and reason."),
    Series("kueue_evicted_workloads_once_total", "counter",
           (CQ, "reason", "underlying_cause", PC),
           "Workloads evicted at least once for a reason (each counted once per reason)."),
    Series("kueue_preempted_workloads_total", "counter", ("preempting_cluster_queue", "reason"),
           "Workloads preempted, per the preemptor's ClusterQueue and the preemption reason."),
    Series("kueue_finished_workloads_total", "counter", (CQ, PC),
           "Workloads that finished, per ClusterQueue."),
    Series("kueue_execution_time_seconds", "histogram", (CQ, PC),
           "From first admission to completion (across evictions).", _LONG),
    Series("kueue_cluster_queue_status", "gauge", (CQ, "status"),
           "1 for the ClusterQueue's status: pending, active or terminating."),
    Series("kueue_cluster_queue_info", "gauge", (CQ, "parent_cohort", "root_cohort"),
           "1 per ClusterQueue, with its place in the cohort tree."),
    Series("kueue_cluster_queue_nominal_quota", "gauge", QUOTA,
           "Nominal quota per flavor and resource (cores for cpu, bytes for memory)."),
    Series("kueue_cluster_queue_borrowing_limit", "gauge", QUOTA,
           "Borrowing limit per flavor and resource; +Inf when unset."),
    Series("kueue_cluster_queue_lending_limit", "gauge", QUOTA,
           "Lending limit per flavor and resource; +Inf when unset."),
    Series("kueue_cluster_queue_resource_reservation", "gauge", QUOTA,
           "Quota reserved by the workloads holding it, per flavor and resource."),
    Series("kueue_cluster_queue_resource_usage", "gauge", QUOTA,
           "Quota used by admitted workloads, per flavor and resource."),
    # LocalQueue
    Series("kueue_local_queue_pending_workloads", "gauge", (*LQ, "status"),
           "Pending workloads of a LocalQueue: active or inadmissible."),
    Series("kueue_local_queue_quota_reserved_workloads_total", "counter", (*LQ, PC),
           "Quota reservations, per LocalQueue."),
    Series("kueue_local_queue_quota_reserved_wait_time_seconds", "histogram", (*LQ, PC),
           "From creation or requeue until quota was reserved, per LocalQueue.", _WAIT),
    Series("kueue_local_queue_admitted_workloads_total", "counter", (*LQ, PC),
           "Admissions, per LocalQueue."),
    Series("kueue_local_queue_admission_wait_time_seconds", "histogram", (*LQ, PC),
           "From creation or requeue until admission, per LocalQueue.", _LONG),
    Series("kueue_local_queue_admission_checks_wait_time_seconds", "histogram", (*LQ, PC),
           "From quota reservation until admission, per LocalQueue.", _WAIT),
    Series("kueue_local_queue_admitted_active_workloads", "gauge", LQ,
           "Admitted workloads that are active, per LocalQueue."),
    Series("kueue_local_queue_reserving_active_workloads", "gauge", LQ,
           "Workloads holding quota, per LocalQueue."),
    Series("kueue_local_queue_evicted_workloads_total", "counter",
           (*LQ, "reason", "underlying_cause", PC),
           "Evictions, per LocalQueue and reason."),
    Series("kueue_local_queue_finished_workloads_total", "counter", (*LQ, PC),
           "Workloads that finished, per LocalQueue."),
    Series("kueue_local_queue_execution_time_seconds", "histogram", (*LQ, PC),
           "From first admission to completion, per LocalQueue.", _LONG),
    Series("kueue_local_queue_resource_reservation", "gauge", (*LQ, "flavor", "resource"),
           "Quota reserved by a LocalQueue's workloads, per flavor and resource."),
    Series("kueue_local_queue_resource_usage", "gauge", (*LQ, "flavor", "resource"),
           "Quota used by a LocalQueue's admitted workloads, per flavor and resource."),
    Series("kueue_local_queue_status", "gauge", (*LQ, "active"),
           "1 for the LocalQueue's Active condition status: True, False or Unknown."),
    # Cohort
    Series("kueue_cohort_info", "gauge", ("cohort", "parent_cohort", "root_cohort"),
           "1 per cohort, with its place in the cohort tree."),
    Series("kueue_cohort_subtree_quota", "gauge", ("cohort", "flavor", "resource"),
           "Nominal quota of the cohort's subtree, per flavor and resource."),
    Series("kueue_cohort_subtree_resource_reservations", "gauge",
           ("cohort", "flavor", "resource"),
           "Quota reserved in the cohort's subtree, per flavor and resource."),
    Series("kueue_cohort_subtree_admitted_active_workloads", "gauge", ("cohort",),
           "Admitted active workloads in the cohort's subtree."),
    Series("kueue_cohort_subtree_admitted_workloads_total", "counter", ("cohort", PC),
           "Admissions in the cohort's subtree."),
)  # fmt: skip

GAUGES: Final = frozenset(s.name for s in SERIES if s.kind == "gauge")


class Sample(NamedTuple):
    """One change to a counter (`value` added) or a histogram (`value` observed)."""

    series: str
    labels: tuple[str, ...]  # without replica_role
    value: float = 1.0


Gauges = Mapping[str, Mapping[tuple[str, ...], float]]
"""Every gauge's value per label values (without replica_role); a label set absent from a
snapshot is removed from the export."""


def quantity(milli: int) -> float:
    """A muster quantity (milli-units) as Kueue exports it: cores, bytes, units."""
    return milli / 1000


def unlimited_or(milli: int | None) -> float:
    return math.inf if milli is None else quantity(milli)


class KueueSeries:
    """Kueue's series in `registry`, exported with `replica_role` = `role`."""

    def __init__(self, registry: CollectorRegistry, *, role: str = LEADER) -> None:
        self.role = role
        self._metrics: dict[str, Counter | Histogram] = {}
        self._gauges: dict[str, Gauge] = {}
        for s in SERIES:
            labels = [*s.labels, "replica_role"]
            if s.kind == "counter":
                self._metrics[s.name] = Counter(s.name, s.help, labels, registry=registry)
            elif s.kind == "gauge":
                self._gauges[s.name] = Gauge(s.name, s.help, labels, registry=registry)
            else:
                self._metrics[s.name] = Histogram(
                    s.name, s.help, labels, buckets=s.buckets, registry=registry
                )
        # Each gauge's label sets as exported, with their values: a refresh sets only what
        # changed (a pass over every queue, ten times a second, was mostly `labels()` calls).
        self._exported: dict[str, dict[tuple[str, ...], float]] = {name: {} for name in GAUGES}
        # `labels()` validates and locks on every call: children are looked up once.
        self._children: dict[tuple[str, tuple[str, ...]], Counter | Histogram] = {}

    def add(self, samples: list[Sample]) -> None:
        """Count or observe each sample (KeyError for a gauge: see `set_gauges`)."""
        for s in samples:
            key = (s.series, s.labels)
            metric = self._children.get(key)
            if metric is None:
                metric = self._children[key] = self._metrics[s.series].labels(*s.labels, self.role)
            if isinstance(metric, Histogram):
                metric.observe(s.value)
            else:
                metric.inc(s.value)

    def set_gauges(self, gauges: Gauges) -> None:
        """Export exactly `gauges`: set the values that changed, remove label sets no longer
        there."""
        for name in GAUGES:
            gauge = self._gauges[name]
            now = gauges.get(name, {})
            exported = self._exported[name]
            for labels in exported.keys() - now.keys():
                gauge.remove(*labels, self.role)
                del exported[labels]
            for labels, value in now.items():
                if exported.get(labels) != value:
                    gauge.labels(*labels, self.role).set(value)
                    exported[labels] = value
