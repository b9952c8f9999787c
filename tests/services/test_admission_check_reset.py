"""A check's Ready stored after the workload's eviction (a late answer) counts at its next
reservation, as in Kueue, whose only reset of check states is the eviction's
(evict.resetChecksOnEviction): the Ready written after it stays in status.admissionChecks and
the scheduler admits the next reservation at once (prepareWorkload). The live replica and one
rebuilt from the stream past that Ready decide the same."""

from __future__ import annotations

import pytest
from admission_world import count, eventually, fact, publish, start_admission, submitted, workload
from bus_helpers import EventLog
from test_admission_check_restarts import checked_queue, told

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("restart", [False, True], ids=["live", "rebuilt"])
async def test_a_ready_stored_after_the_eviction_admits_the_next_reservation(
    bus: Bus, bus_config: BusConfig, events: EventLog, restart: bool
) -> None:
    replica = await start_admission(bus_config)
    try:
        await replica.wait_serving()
        await checked_queue(bus, submitted(workload("w")))
        await events.wait_for("quota_reserved", workload="ns/w")
        await publish(bus, told("Ready", "provisioned"))
        await events.wait_for("admitted", workload="ns/w")
        rejected = pb.GangRejected(reason="GangTimedOut", message="1 of 2 pods placed")
        await publish(bus, fact("gang_rejected", "ns/w", rejected))
        await events.wait_for("evicted", workload="ns/w")
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
