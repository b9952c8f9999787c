"""Admission fair sharing in the admission service, on a real nats-server: one team's flood
yields to another team's later workload, and a replica restarted from a snapshot (which holds
no finished workload's story) still knows what the finished ones used."""

from __future__ import annotations

from typing import Any

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    count,
    drained,
    fact,
    flavor,
    local_queue,
    publish,
    snapshot_written,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.api.model import AdmissionFairSharingConfig, KueueConfig
from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(60)

FAIR = KueueConfig(admission_fair_sharing=AdmissionFairSharingConfig(usage_half_life_s=600.0))
SNAPSHOT_S = 0.2


def shared_queue() -> dict[str, Any]:
    cq = cluster_queue(cpu="3")
    cq["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    return cq


async def test_a_flood_yields_to_the_other_team_and_a_restart_from_a_snapshot_decides_the_same(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    first = await start_admission(bus_config, snapshot_s=SNAPSHOT_S, kueue=FAIR)
    await first.wait_serving()
    await publish(
        bus,
        *map(config_applied, (flavor(), shared_queue(), local_queue("a"), local_queue("b"))),
    )
    # Team a floods: a1 (2 cpu) and a2 (1 cpu) run, a3 waits; b1 comes after a3.
    await publish(bus, submitted(workload("a1", cpu="2", queue="a")))
    await publish(bus, submitted(workload("a2", cpu="1", queue="a")))
    await events.wait_for("admitted", workload="ns/a2")
    await publish(bus, submitted(workload("a3", cpu="2", queue="a")))
    await events.wait_for("pending", workload="ns/a3")
    await publish(bus, submitted(workload("b1", cpu="2", queue="b")))
    await events.wait_for("pending", workload="ns/b1")

    # 2 cpu free: b1 goes before the earlier a3, team a having used the queue (main: a3).
    await publish(bus, fact("finished", "ns/a1"))
    admitted = await events.wait_for("admitted", workload="ns/b1")
    await drained(bus, "admission-0")
    assert count(events, "admitted", "ns/a3") == 0

    # a4 before b2, both 1 cpu; the replica restarts from a snapshot without a1's story.
    await publish(bus, submitted(workload("a4", cpu="1", queue="a")))
    await events.wait_for("pending", workload="ns/a4")
    await publish(bus, submitted(workload("b2", cpu="1", queue="b")))
    pending = await events.wait_for("pending", workload="ns/b2")
    await drained(bus, "admission-0")
    await snapshot_written(bus, at_least=max(admitted.sequence, pending.sequence))
    await first.kill()

    second = await start_admission(bus_config, snapshot_s=SNAPSHOT_S, kueue=FAIR)
    try:
        await second.wait_serving()
        # 1 cpu free. Team a's usage is a1's (finished: only the snapshot says so) and a2's,
        # above b1's: b2 goes first. Without a1's, team a would look lighter and a4 would go.
        await publish(bus, fact("finished", "ns/a2"))
        await events.wait_for("admitted", workload="ns/b2")
        await drained(bus, "admission-0")
        assert count(events, "admitted", "ns/a4") == 0
        for key in ("ns/a1", "ns/a2", "ns/b1", "ns/b2"):
            assert count(events, "admitted", key) == 1, key  # none decided twice
    finally:
        await second.stop()
