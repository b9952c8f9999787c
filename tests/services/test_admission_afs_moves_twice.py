"""Admission fair sharing across two moves, on a real nats-server: a LocalQueue whose
ClusterQueue joins a cohort of shard 1's, then, before shard 1 wrote a snapshot, one of shard
2's, still brings what its finished workloads used on shard 0. That usage reached shard 1 in a
record of shard 0's partition, in no history of shard 1's, so shard 2 reads such records too;
restarted without a snapshot, shard 2 orders by the record it wrote."""

from __future__ import annotations

import asyncio

import pytest
from admission_world import (
    UNEXPIRING_LEASE_S,
    config_applied,
    in_partition,
    publish,
    start_admission,
    submitted,
    trees,
    workload,
)
from bus_helpers import EventLog
from test_admission_afs_moves import FAIR, b1_goes_before_a2, shared_queue, team_a_used_the_queue

from muster.bus import Bus, BusConfig
from muster.bus.buckets import SNAPSHOTS_BUCKET
from muster.bus.partitions import partition_of

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
