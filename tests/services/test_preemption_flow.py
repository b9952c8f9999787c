"""Preemption end to end: admission evicts, preemption sends cmd.evict, a binder completes."""

from __future__ import annotations

import pytest
from admission_world import (
    FakeBinder,
    basic_config,
    publish,
    start_admission,
    start_preemption,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(30)

WITHIN = {"withinClusterQueue": "LowerPriority"}


async def test_urgent_workload_preempts_and_is_admitted_once_the_victim_stopped(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    admission = await start_admission(bus_config)
    preemption = await start_preemption(bus_config)
    binder = FakeBinder(bus).start()
    try:
        await admission.wait_serving()
        await preemption.wait_serving()
        await basic_config(bus, cpu="4", preemption=WITHIN)
        await publish(bus, submitted(workload("low", cpu="3", priority=0)))
        await events.wait_for("admitted", workload="ns/low")
        await publish(bus, submitted(workload("urgent", cpu="3", priority=100)))

        request = await events.wait_for("preemption_requested", workload="ns/urgent")
        assert [v.workload for v in request.preemption_requested.victims] == ["ns/low"]
        evicted = await events.wait_for("evicted", workload="ns/low")
        assert evicted.evicted.reason == "Preempted"
        assert evicted.evicted.preemptor == "ns/urgent"
        await events.wait_for("eviction_completed", workload="ns/low")
        admitted = await events.wait_for("admitted", workload="ns/urgent")
        assert admitted.sequence > evicted.sequence
        assert [c.workload for c in binder.commands] == ["ns/low"]
        assert binder.commands[0].evict_requested.attempt == 1
        await events.wait_for("requeued", workload="ns/low")
    finally:
        await binder.stop()
        await preemption.stop()
        await admission.stop()
