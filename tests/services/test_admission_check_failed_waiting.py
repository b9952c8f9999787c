"""A check's Rejected told while the workload waits for quota (task checkverdicts): Kueue's
workload controller acts on it only while the workload holds quota (so no deactivation), but
it stays in status.admissionChecks and the scheduler (nominate) leaves the workload
unreserved, "The workload has failed admission checks", until the check says otherwise. The
live replica and one rebuilt from the stream past that Rejected decide the same."""

from __future__ import annotations

import pytest
from admission_world import count, fact, publish, start_admission
from bus_helpers import EventLog
from test_admission_check_restarts import (
    queued_behind_blocker,
    read_then_restarted,
    set_aside,
    told,
)

from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("restart", [False, True], ids=["live", "rebuilt"])
async def test_a_rejected_told_while_queued_keeps_it_unreserved_until_a_ready(
    bus: Bus, bus_config: BusConfig, events: EventLog, restart: bool
) -> None:
    replica = await start_admission(bus_config)
    try:
        await replica.wait_serving()
        await queued_behind_blocker(bus, events)
        await publish(bus, told("Rejected", "no capacity"))
        replica = await read_then_restarted(bus, bus_config, events, replica, restart=restart)
        await publish(bus, fact("deleted", "ns/blocker"))

        await events.wait_until(set_aside, timeout_s=20)
        assert count(events, "quota_reserved", "ns/w") == 0
        assert count(events, "evicted", "ns/w") == 0  # not deactivated: it held no quota

        await publish(bus, told("Ready", "provisioned"))
        await events.wait_for("admitted", workload="ns/w", timeout_s=20)
    finally:
        await replica.stop()
