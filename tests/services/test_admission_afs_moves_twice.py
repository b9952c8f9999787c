"""Admission fair sharing across two moves, on a real nats-server: a LocalQueue whose
ClusterQueue joins a cohort of shard 1's, then, before shard 1 wrote a snapshot, one of shard
2's, still brings what its finished workloads used on shard 0. That usage reached shard 1 in a
record of shard 0's partition, in no history of shard 1's, so shard 2 reads such records too;
restarted without a snapshot, shard 2 orders by the record it wrote. A LocalQueue that comes
back to shard 0's cohort and leaves again carries a1's usage once, not twice."""

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
from test_admission_afs_moves import (
    FAIR,
    b1_goes_before_a2,
    moved_once,
    shared_queue,
    team_a_used_the_queue,
)

from muster.bus import Bus, BusConfig
from muster.bus.buckets import SNAPSHOTS_BUCKET
from muster.bus.partitions import partition_of
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(120)


async def test_a_local_queue_moved_twice_before_a_snapshot_keeps_its_first_carry(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    first, middle, last = trees(3)  # decided by shards 0, 1 and 2
    mid, new = partition_of(f"cohort/{middle}"), partition_of(f"cohort/{last}")
    settings = {"shards": 3, "lease_ttl_s": UNEXPIRING_LEASE_S, "kueue": FAIR}
    replicas = [await start_admission(bus_config, shard=i, **settings) for i in range(3)]
    try:
        await asyncio.gather(*(r.wait_serving() for r in replicas))
        await team_a_used_the_queue(bus, events, first)

        # To shard 1, which takes a1's usage from shard 0's history; c1 fills the queue there.
        await publish(bus, config_applied(shared_queue(middle)))
        await publish(bus, in_partition(submitted(workload("c1", cpu="2", queue="c")), mid))
        assert (await events.wait_for("admitted", workload="ns/c1")).source == "admission/1"
        # To shard 2 before shard 1 wrote a snapshot: c1's story and a1's usage come along.
        await publish(bus, config_applied(shared_queue(last)))
        await publish(bus, in_partition(submitted(workload("a2", cpu="2", queue="a")), new))
        assert (await events.wait_for("pending", workload="ns/a2")).source == "admission/2"
        # Shard 2 dies and, its snapshot lost, rebuilds from the stream alone.
        await replicas[2].kill()
        await (await bus.js.object_store(SNAPSHOTS_BUCKET)).delete("admission-2")
        replicas[2] = await start_admission(bus_config, shard=2, **settings)
        await replicas[2].wait_serving()

        # Team a asked before team b; with a1's usage carried twice, b1 goes first.
        await b1_goes_before_a2(bus, events, new, shard=2)
    finally:
        for r in replicas:
            await r.stop()


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
    """The ClusterQueue joins a cohort of shard 1's, one of shard 0's again, then shard 1's
    again, no snapshot written. Shard 1's second handover reads shard 0's partition from its
    beginning: a1's finished run, and the record that brought a1's usage back, which holds it
    already."""
    async with moved_once(bus, bus_config, events) as (_, here, there):
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
