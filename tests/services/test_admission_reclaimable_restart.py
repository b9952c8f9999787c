"""Reclaimable pods through the admission service and a real nats-server: a running workload's
finished pods let a waiting one in, and the replica that takes over holds the same."""

from __future__ import annotations

import pytest
from admission_world import basic_config, fact, publish, start_admission, submitted, workload
from bus_helpers import EventLog

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)


async def test_finished_pods_free_quota_and_a_restarted_replica_holds_the_same(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    first = await start_admission(bus_config)
    try:
        await first.wait_serving()
        await basic_config(bus, cpu="4")
        await publish(bus, submitted(workload("a", cpu="1", count=4)))
        await events.wait_for("admitted", workload="ns/a")
        await publish(bus, submitted(workload("b", cpu="2")))
        await events.wait_for("pending", workload="ns/b")

        two = pb.WorkloadReclaimablePods(pods=[pb.ReclaimablePodCount(pod_set="main", count=2)])
        await publish(bus, fact("reclaimable_pods", "ns/a", two))
        await events.wait_for("admitted", workload="ns/b")
    finally:
        await first.kill()

    second = await start_admission(bus_config)
    try:
        await second.wait_serving()
        await publish(bus, submitted(workload("c", cpu="1")))
        pending = await events.wait_for("pending", workload="ns/c", timeout_s=30)
        # a's 2 cpu and b's 2 fill the 4: 1 more needed (3 had the rebuild forgotten a's pods)
        assert pending.pending.message.endswith("insufficient unused quota for cpu in flavor "
                                                "default, 1 more needed")  # fmt: skip
        assert len(events.matching("admitted", workload="ns/b")) == 1
    finally:
        await second.stop()
