"""Kueue's series as admission computes them from its rounds, read from the registry (no HTTP):
counts and labels match what the rounds decided, gauges follow the engine."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from admission_stream import (
    StoringPublisher,
    applied,
    cluster_queue,
    flavor,
    local_queue,
    reported,
    submitted,
    workload,
)
from prometheus_client import CollectorRegistry

from muster.admission.handlers import Rounds
from muster.admission.metrics import AdmissionMetrics, ReplicaSeries
from muster.admission.state import AdmissionState
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(10)

LEADER = {"replica_role": "leader"}


class World:
    """One admission replica's rounds with metrics on, fed one event per batch."""

    def __init__(self, *manifests: dict[str, Any]) -> None:
        self.registry = CollectorRegistry()
        self.state = AdmissionState()
        self.state.take_ownership(now_s=0.0)
        self.now_s = 100.0
        series = ReplicaSeries(self.registry, shard=0, clock=lambda: self.now_s)
        self.metrics = AdmissionMetrics(series, self.state, clock=lambda: self.now_s)
        # One stream: the decisions published and the events consumed share its sequences.
        self.sequences = itertools.count(1)
        self.publisher = StoringPublisher(self.sequences)
        self.rounds = Rounds(
            self.state, self.publisher, clock=lambda: self.now_s, metrics=self.metrics
        )
        self.manifests = manifests

    async def configure(self) -> World:
        for manifest in self.manifests:
            await self.run(applied(manifest))
        return self

    async def run(self, env: pb.Envelope, *, at_s: float | None = None) -> None:
        if at_s is not None:
            self.now_s = at_s
        env.sequence = next(self.sequences)
        await self.rounds.apply_batch([env])
        self.metrics.refresh_gauges()

    def value(self, series: str, /, **labels: str) -> float | None:
        return self.registry.get_sample_value(series, {**labels, **LEADER})


def two_queues() -> World:
    return World(
        flavor(),
        {**cluster_queue(cpu="3", cohort="org", preempt=True)},
        cluster_queue("other", cpu="1", cohort="org"),
        local_queue(),
    )


@pytest.fixture
async def world() -> World:
    return await two_queues().configure()


async def test_admissions_preemption_and_the_pending_gauge_follow_what_happened(
    world: World,
) -> None:
    for name in ("a", "b", "c"):
        await world.run(submitted(workload(name)), at_s=100.0)
    assert world.value("kueue_admitted_workloads_total", cluster_queue="cq", priority_class="") == 3
    assert world.value("kueue_admitted_active_workloads", cluster_queue="cq") == 3
    # Nominal 3 cpu and 1 more borrowed from "other": the 2-cpu workload must preempt one.
    await world.run(submitted(workload("big", cpu="2", priority=100)), at_s=160.0)
    preempted = world.value(
        "kueue_preempted_workloads_total", preempting_cluster_queue="cq", reason="InClusterQueue"
    )
    assert preempted == 1
    evicted = {"cluster_queue": "cq", "reason": "Preempted", "underlying_cause": ""}
    assert world.value("kueue_evicted_workloads_total", **evicted, priority_class="") == 1
    assert world.value("kueue_pending_workloads", cluster_queue="cq", status="inadmissible") == 1
    victim = next(e.workload for e in world.publisher.stored if e.type == "workload.evicted")
    await world.run(reported("eviction_completed", victim), at_s=161.0)
    assert world.value("kueue_admitted_workloads_total", cluster_queue="cq", priority_class="") == 4
    for env in list(world.publisher.stored):
        if env.type == "workload.admitted":
            await world.run(reported("finished", env.workload), at_s=200.0)
    pending = [
        world.value("kueue_pending_workloads", cluster_queue="cq", status=s)
        for s in ("active", "inadmissible")
    ]
    assert pending == [0, 0]
    assert world.value("kueue_finished_workloads_total", cluster_queue="cq", priority_class="") == 4
    assert world.value("kueue_reserving_active_workloads", cluster_queue="cq") == 0


async def test_wait_and_execution_times_come_from_the_events(world: World) -> None:
    await world.run(submitted(workload("a"), at_s=90.0), at_s=100.0)
    waited = {"cluster_queue": "cq", "priority_class": ""}
    assert world.value("kueue_admission_wait_time_seconds_count", **waited) == 1
    assert world.value("kueue_admission_wait_time_seconds_sum", **waited) == pytest.approx(10.0)
    lq = {"name": "lq", "namespace": "ns", "priority_class": ""}
    assert world.value("kueue_local_queue_admitted_workloads_total", **lq) == 1
    await world.run(reported("finished", "ns/a"), at_s=130.0)
    assert world.value("kueue_execution_time_seconds_sum", **waited) == pytest.approx(30.0)
    assert (
        world.value(
            "kueue_cohort_subtree_admitted_workloads_total", cohort="org", priority_class=""
        )
        == 1
    )
    assert world.value("kueue_admission_attempts_total", result="success") == 1


async def test_quota_gauges_say_what_each_queue_holds_in_kueues_units(world: World) -> None:
    await world.run(submitted(workload("a", cpu="2")))
    quota = {"cohort": "org", "cluster_queue": "cq", "flavor": "default", "resource": "cpu"}
    assert world.value("kueue_cluster_queue_nominal_quota", **quota) == 3.0
    assert world.value("kueue_cluster_queue_borrowing_limit", **quota) == float("inf")
    assert world.value("kueue_cluster_queue_resource_reservation", **quota) == 2.0
    assert world.value("kueue_cluster_queue_resource_usage", **quota) == 2.0
    subtree = {"cohort": "org", "flavor": "default", "resource": "cpu"}
    assert world.value("kueue_cohort_subtree_quota", **subtree) == 4.0
    assert world.value("kueue_cohort_subtree_resource_reservations", **subtree) == 2.0
    assert world.value("kueue_cluster_queue_status", cluster_queue="cq", status="active") == 1
    assert world.value("kueue_local_queue_status", name="lq", namespace="ns", active="True") == 1
    usage = {"name": "lq", "namespace": "ns", "flavor": "default", "resource": "cpu"}
    assert world.value("kueue_local_queue_resource_usage", **usage) == 2.0


async def test_a_deleted_cluster_queue_leaves_the_gauges(world: World) -> None:
    payload = pb.ConfigDeleted(kind="ClusterQueue", name="other")
    await world.run(reported("config_deleted", "", payload))
    assert world.value("kueue_cluster_queue_status", cluster_queue="other", status="active") is None
    assert world.value("kueue_cluster_queue_status", cluster_queue="cq", status="active") == 1


async def test_a_rejected_admission_check_counts_as_kueues_deactivation() -> None:
    check = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": "prov"},
        "spec": {"controllerName": "example.com/prov"},
    }
    checked = cluster_queue(cpu="3")
    checked["spec"]["admissionChecks"] = ["prov"]
    world = await World(flavor(), check, checked, local_queue()).configure()
    await world.run(submitted(workload("a")))
    assert (
        world.value("kueue_quota_reserved_workloads_total", cluster_queue="cq", priority_class="")
        == 1
    )
    assert (
        world.value("kueue_admitted_workloads_total", cluster_queue="cq", priority_class="") is None
    )
    rejected = pb.AdmissionCheckUpdated(check="prov", state="Rejected", message="no room")
    await world.run(reported("admission_check", "ns/a", rejected))
    evicted = {"cluster_queue": "cq", "reason": "Deactivated", "underlying_cause": "AdmissionCheck"}
    assert world.value("kueue_evicted_workloads_total", **evicted, priority_class="") == 1
