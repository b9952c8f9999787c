"""Kueue's metric names, types and labels, kept here as Kueue's `pkg/metrics` has them: muster
exports each under the same name, type and labels, so Kueue's dashboards and alerts work."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from muster.metrics.kueue_series import SERIES, KueueSeries, Sample

CQ, PC, RR = "cluster_queue", "priority_class", "replica_role"
LQ = ("name", "namespace")
QUOTA = ("cohort", CQ, "flavor", "resource", RR)

# name -> (type, labels), copied by hand from Kueue's pkg/metrics/metrics.go (the series muster
# has the concept for; the rest are listed in docs/observability.md as not exported).
KUEUE: dict[str, tuple[str, tuple[str, ...]]] = {
    "kueue_admission_attempts_total": ("counter", ("result", RR)),
    "kueue_admission_attempt_duration_seconds": ("histogram", ("result", RR)),
    "multikueue_workloads_dispatched_total": ("counter", (CQ, "cluster", RR)),
    "multikueue_workloads_admitted_total": ("counter", (CQ, "cluster", RR)),
    "multikueue_workloads_evicted_total": ("counter", (CQ, "cluster", "reason", RR)),
    "multikueue_cluster_status": ("gauge", (CQ, "cluster", "active", RR)),
    "kueue_pending_workloads": ("gauge", (CQ, "status", RR)),
    "kueue_quota_reserved_workloads_total": ("counter", (CQ, PC, RR)),
    "kueue_quota_reserved_wait_time_seconds": ("histogram", (CQ, PC, RR)),
    "kueue_admitted_workloads_total": ("counter", (CQ, PC, RR)),
    "kueue_admission_wait_time_seconds": ("histogram", (CQ, PC, RR)),
    "kueue_admission_checks_wait_time_seconds": ("histogram", (CQ, PC, RR)),
    "kueue_admitted_active_workloads": ("gauge", (CQ, RR)),
    "kueue_reserving_active_workloads": ("gauge", (CQ, RR)),
    "kueue_evicted_workloads_total": ("counter", (CQ, "reason", "underlying_cause", PC, RR)),
    "kueue_evicted_workloads_once_total": ("counter", (CQ, "reason", "underlying_cause", PC, RR)),
    "kueue_preempted_workloads_total": ("counter", ("preempting_cluster_queue", "reason", RR)),
    "kueue_finished_workloads_total": ("counter", (CQ, PC, RR)),
    "kueue_execution_time_seconds": ("histogram", (CQ, PC, RR)),
    "kueue_cluster_queue_status": ("gauge", (CQ, "status", RR)),
    "kueue_cluster_queue_info": ("gauge", (CQ, "parent_cohort", "root_cohort", RR)),
    "kueue_cluster_queue_nominal_quota": ("gauge", QUOTA),
    "kueue_cluster_queue_borrowing_limit": ("gauge", QUOTA),
    "kueue_cluster_queue_lending_limit": ("gauge", QUOTA),
    "kueue_cluster_queue_resource_reservation": ("gauge", QUOTA),
    "kueue_cluster_queue_resource_usage": ("gauge", QUOTA),
    "kueue_local_queue_pending_workloads": ("gauge", (*LQ, "status", RR)),
    "kueue_local_queue_quota_reserved_workloads_total": ("counter", (*LQ, PC, RR)),
    "kueue_local_queue_quota_reserved_wait_time_seconds": ("histogram", (*LQ, PC, RR)),
    "kueue_local_queue_admitted_workloads_total": ("counter", (*LQ, PC, RR)),
    "kueue_local_queue_admission_wait_time_seconds": ("histogram", (*LQ, PC, RR)),
    "kueue_local_queue_admission_checks_wait_time_seconds": ("histogram", (*LQ, PC, RR)),
    "kueue_local_queue_admitted_active_workloads": ("gauge", (*LQ, RR)),
    "kueue_local_queue_reserving_active_workloads": ("gauge", (*LQ, RR)),
    "kueue_local_queue_evicted_workloads_total": (
        "counter",
        (*LQ, "reason", "underlying_cause", PC, RR),
    ),
    "kueue_local_queue_finished_workloads_total": ("counter", (*LQ, PC, RR)),
    "kueue_local_queue_execution_time_seconds": ("histogram", (*LQ, PC, RR)),
    "kueue_local_queue_resource_reservation": ("gauge", (*LQ, "flavor", "resource", RR)),
    "kueue_local_queue_resource_usage": ("gauge", (*LQ, "flavor", "resource", RR)),
    "kueue_local_queue_status": ("gauge", (*LQ, "active", RR)),
    "kueue_cohort_info": ("gauge", ("cohort", "parent_cohort", "root_cohort", RR)),
    "kueue_cohort_subtree_quota": ("gauge", ("cohort", "flavor", "resource", RR)),
    "kueue_cohort_subtree_resource_reservations": ("gauge", ("cohort", "flavor", "resource", RR)),
    "kueue_cohort_subtree_admitted_active_workloads": ("gauge", ("cohort", RR)),
    "kueue_cohort_subtree_admitted_workloads_total": ("counter", ("cohort", PC, RR)),
}


def exported() -> dict[str, tuple[str, tuple[str, ...]]]:
    """What a registry holds once every series has a sample: exposed name, type and labels."""
    registry = CollectorRegistry()
    series = KueueSeries(registry)
    # Children exist only once labelled: one sample of each, with made-up label values.
    gauges: dict[str, dict[tuple[str, ...], float]] = {}
    for s in SERIES:
        values = tuple(f"x{i}" for i in range(len(s.labels)))
        if s.kind == "gauge":
            gauges[s.name] = {values: 1.0}
        else:
            series.add([Sample(s.name, values)])
    series.set_gauges(gauges)
    out = {}
    for family in registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = next(tuple(x.labels) for x in family.samples if "le" not in x.labels)
        out[name] = (family.type, labels)
    return out


@pytest.mark.parametrize("name", sorted(KUEUE))
def test_kueue_series_is_exported_with_kueues_type_and_labels(name: str) -> None:
    assert exported()[name] == KUEUE[name]


def test_muster_exports_no_kueue_series_kueue_does_not_have() -> None:
    assert sorted(exported()) == sorted(KUEUE)
