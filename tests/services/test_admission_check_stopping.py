"""A check's Retry or Rejected told while the workload's pods stop (evicted, quota still held):
Kueue resets check states once, when the eviction begins (resetChecksOnEviction); what a check
says after that stays in status.admissionChecks, and the workload controller does not act on
it while the workload is evicted. Once the pods are gone and it is queued again, the scheduler
(nominate) leaves it unreserved, "The workload has failed admission checks", until the check
says otherwise. Before, muster dropped a Retry or Rejected told while the pods stopped and
reserved the workload again at once. The live replica and one rebuilt from the stream past
that verdict decide the same (task leftovers)."""

from __future__ import annotations

import pytest
from admission_world import count, fact, publish, start_admission
from bus_helpers import EventLog
from test_admission_check_restarts import (
    a_ready_reserves_it_again,
    admitted_then_evicted,
    read_then_restarted,
    set_aside,
    told,
)

from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("restart", [False, True], ids=["live", "rebuilt"])
@pytest.mark.parametrize("verdict", ["Rejected", "Retry"])
async def test_a_verdict_told_while_pods_stop_keeps_it_unreserved_until_a_ready(
    bus: Bus, bus_config: BusConfig, events: EventLog, verdict: str, restart: bool
) -> None:
    replica = await start_admission(bus_config)
    try:
        await replica.wait_serving()
        await admitted_then_evicted(bus, events)
        # Its pods are stopping; prov, reset to Pending at the eviction, now says no.
        await publish(bus, told(verdict, "no capacity"))
        replica = await read_then_restarted(bus, bus_config, events, replica, restart=restart)
        await publish(bus, fact("eviction_completed", "ns/w"))

        await events.wait_until(set_aside, timeout_s=20)
        assert count(events, "quota_reserved", "ns/w") == 1
        assert count(events, "evicted", "ns/w") == 1  # its verdict evicts nothing more

        await a_ready_reserves_it_again(bus, events)
    finally:
        await replica.stop()
