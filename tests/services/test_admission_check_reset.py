"""A check's Ready stored after the workload's eviction (a late answer) counts at its next
reservation, as in Kueue, whose only reset of check states is the eviction's
(evict.resetChecksOnEviction): the Ready written after it stays in status.admissionChecks and
the scheduler admits the next reservation at once (prepareWorkload). The live replica and one
rebuilt from the stream past that Ready decide the same."""

from __future__ import annotations

import pytest
from admission_world import count, eventually, fact, publish, start_admission
from bus_helpers import EventLog
from test_admission_check_restarts import admitted_then_evicted, told

from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("restart", [False, True], ids=["live", "rebuilt"])
async def test_a_ready_stored_after_the_eviction_admits_the_next_reservation(
    bus: Bus, bus_config: BusConfig, events: EventLog, restart: bool
) -> None:
    replica = await start_admission(bus_config)
    try:
        await replica.wait_serving()
        await admitted_then_evicted(bus, events)
        # Kueue reset prov to Pending at the eviction; its controller says Ready since.
        await publish(bus, told("Ready", "provisioned again"))
        if restart:
            await replica.kill()
            replica = await start_admission(bus_config)
            await replica.wait_serving()
        await publish(bus, fact("eviction_completed", "ns/w"))
        await events.wait_for("requeued", workload="ns/w")

        async def admitted_again() -> bool:  # with no answer after its new reservation
            return count(events, "admitted", "ns/w") == 2

        await eventually(admitted_again)
    finally:
        await replica.stop()
