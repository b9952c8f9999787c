"""Issue 13 and 20 decisions through the admission service on a real nats-server: the same core,
with quota held until evicted pods are reported gone."""

from __future__ import annotations

import pytest
from admission_world import (
    KUEUE,
    cluster_queue,
    config_applied,
    fact,
    flavor,
    local_queue,
    publish,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(30)


async def test_quota_freed_for_a_waiting_preemptor_stays_its_own(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        lower = {"withinClusterQueue": "LowerPriority"}
        await publish(
            bus,
            config_applied(flavor()),
            config_applied(cluster_queue(cpu="6", preemption=lower)),
            config_applied(local_queue()),
        )
        lows = [workload(f"low{i}", cpu="2", priority=0) for i in (1, 2, 3)]
        await publish(bus, *(submitted(wl) for wl in lows))
        await events.wait_for("admitted", workload="ns/low3")
        await publish(bus, submitted(workload("waiting", cpu="2", priority=0)))
        await events.wait_for("pending", workload="ns/waiting")
        await publish(bus, submitted(workload("urgent", cpu="4", priority=10)))
        request = await events.wait_for("preemption_requested", workload="ns/urgent")
        victims = [v.workload for v in request.preemption_requested.victims]
        assert victims == ["ns/low3", "ns/low2"]
        waits = await events.wait_for("pending", workload="ns/urgent")
        assert waits.pending.reason == "WaitingForPreemptedWorkloads"

        # The first victim's pods are gone: its quota is urgent's, not waiting's.
        await publish(bus, fact("eviction_completed", victims[0]))
        await events.wait_for("requeued", workload=victims[0])
        await publish(bus, fact("eviction_completed", victims[1]))
        await events.wait_for("admitted", workload="ns/urgent")

        assert events.matching("admitted", workload="ns/waiting") == []
        assert len(events.matching("preemption_requested", workload="ns/urgent")) == 1
        assert events.matching("evicted", workload="ns/low1") == []
    finally:
        await admission.stop()


async def test_a_cohort_cycle_stops_every_queue_on_it(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        cohorts = [
            {
                "apiVersion": KUEUE,
                "kind": "Cohort",
                "metadata": {"name": a},
                "spec": {"parentName": b},
            }
            for a, b in (("a", "b"), ("b", "a"))
        ]
        await publish(
            bus,
            config_applied(flavor()),
            *(config_applied(c) for c in cohorts),
            config_applied(cluster_queue("cq-a", cohort="a")),
            config_applied(cluster_queue("cq-b", cohort="b")),
            config_applied(local_queue("lq-a", cq="cq-a")),
            config_applied(local_queue("lq-b", cq="cq-b")),
        )
        await publish(
            bus,
            submitted(workload("in-a", queue="lq-a")),
            submitted(workload("in-b", queue="lq-b")),
        )
        for key, cq in (("ns/in-a", "cq-a"), ("ns/in-b", "cq-b")):
            pending = await events.wait_for("pending", workload=key)
            assert (pending.pending.reason, pending.pending.message) == (
                "Suspended",
                f"ClusterQueue {cq} is inactive",
            )
        assert events.matching("admitted") == []
    finally:
        await admission.stop()


async def test_a_stopped_queue_takes_back_quota_only_reserved(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    admission = await start_admission(bus_config)
    try:
        await admission.wait_serving()
        check = {
            "apiVersion": KUEUE,
            "kind": "AdmissionCheck",
            "metadata": {"name": "prov"},
            "spec": {"controllerName": "example.com/prov"},
        }
        cq = cluster_queue()
        cq["spec"]["admissionChecks"] = ["prov"]
        await publish(
            bus,
            config_applied(flavor()),
            config_applied(check),
            config_applied(cq),
            config_applied(local_queue()),
        )
        await publish(bus, submitted(workload("w")))
        await events.wait_for("quota_reserved", workload="ns/w")

        cq["spec"]["stopPolicy"] = "Hold"
        await publish(bus, config_applied(cq))
        pending = await events.wait_for("pending", workload="ns/w")
        assert (pending.pending.reason, pending.pending.message) == (
            "Suspended",
            "ClusterQueue cq is stopped",
        )
        assert events.matching("evicted", workload="ns/w") == []
        assert events.matching("admitted", workload="ns/w") == []
    finally:
        await admission.stop()
