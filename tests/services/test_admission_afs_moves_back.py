"""Admission fair sharing when a LocalQueue comes back, on a real nats-server: its ClusterQueue
joins a cohort of shard 1's, then one of shard 0's again, then shard 1's again, with no
snapshot written. Shard 1's second handover reads shard 0's partition from its beginning: a1's
finished run there, and the record that brought a1's usage back. That record already holds
it, so the usage carried the second time is a1's once, not twice."""

from __future__ import annotations

import asyncio

import pytest
from admission_world import (
    UNEXPIRING_LEASE_S,
    config_applied,
    drained,
    in_partition,
    publish,
    start_admission,
    submitted,
    trees,
    workload,
)
from bus_helpers import EventLog
from test_admission_afs_moves import FAIR, shared_queue, team_a_used_the_queue

from muster.bus import Bus, BusConfig
from muster.bus.partitions import partition_of
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(120)


def carried(events: EventLog, local_queue: str) -> list[pb.CarriedUsage]:
    """The usage each handover carried for `local_queue`, in the order written."""
    return [
        env.partition_changed.queue_left.usage
        for env in events.matching("partition_changed")
        if env.partition_changed.queue_left.local_queue == local_queue
        and env.partition_changed.queue_left.HasField("usage")
    ]


async def carries(events: EventLog, local_queue: str, n: int) -> list[pb.CarriedUsage]:
    await events.wait_until(lambda _: len(carried(events, local_queue)) >= n, timeout_s=60.0)
    return carried(events, local_queue)


async def test_a_local_queue_that_comes_back_carries_its_first_usage_once(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    here, there = trees()  # decided by shard 0, by shard 1
    old, new = partition_of(f"cohort/{here}"), partition_of(f"cohort/{there}")
    settings = {"shards": 2, "lease_ttl_s": UNEXPIRING_LEASE_S, "kueue": FAIR}
    replicas = [await start_admission(bus_config, shard=i, **settings) for i in range(2)]
    try:
        await asyncio.gather(*(r.wait_serving() for r in replicas))
        await team_a_used_the_queue(bus, events, here)  # a1 ran and finished on shard 0

        await publish(bus, config_applied(shared_queue(there)))
        await publish(bus, in_partition(submitted(workload("c1", cpu="2", queue="c")), new))
        assert (await events.wait_for("admitted", workload="ns/c1")).source == "admission/1"
        first = (await carries(events, "ns/a", 1))[0]
        # Back to shard 0 (a1's usage comes back in a record), then to shard 1 again.
        await publish(bus, config_applied(shared_queue(here)))
        await carries(events, "ns/a", 2)
        await drained(bus, "admission-0")
        await publish(bus, config_applied(shared_queue(there)))
        again = (await carries(events, "ns/a", 3))[2]

        # a1's usage only fades between the carries (half-life 600 s, seconds apart).
        assert again.at_s >= first.at_s
        assert 0.9 * first.consumed["cpu"] < again.consumed["cpu"] <= first.consumed["cpu"]
        assert old != new
    finally:
        for r in replicas:
            await r.stop()
