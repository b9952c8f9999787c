"""Admission fair sharing across a tree's move, on a real nats-server: a LocalQueue whose
ClusterQueue joins a cohort another replica decides brings what its finished workloads used
(the replica that takes it reads it from the old partition's history), and that replica,
restarted, still orders by it: from its snapshot, or without one from the record it wrote."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from admission_world import (
    UNEXPIRING_LEASE_S,
    cluster_queue,
    config_applied,
    count,
    drained,
    fact,
    flavor,
    in_partition,
    local_queue,
    publish,
    start_admission,
    submitted,
    trees,
    workload,
)
from bus_helpers import EventLog

from muster.api.model import AdmissionFairSharingConfig, KueueConfig
from muster.bus import Bus, BusConfig
from muster.bus.buckets import SNAPSHOTS_BUCKET
from muster.bus.partitions import partition_of

pytestmark = pytest.mark.timeout(90)

FAIR = KueueConfig(admission_fair_sharing=AdmissionFairSharingConfig(usage_half_life_s=600.0))


def shared_queue(cohort: str) -> dict[str, Any]:
    cq = cluster_queue("shared", cpu="2", cohort=cohort)
    cq["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    return cq


async def team_a_used_the_queue(bus: Bus, events: EventLog, cohort: str) -> None:
    """LocalQueues a, b and c share ClusterQueue `shared`, in `cohort` (shard 0's); team a
    used the whole queue there, and a1 finished: only the partition's history says so."""
    old = partition_of(f"cohort/{cohort}")
    queues = [local_queue(name, cq="shared") for name in "abc"]
    await publish(bus, *map(config_applied, (flavor(), shared_queue(cohort), *queues)))
    await publish(bus, in_partition(submitted(workload("a1", cpu="2", queue="a")), old))
    await events.wait_for("admitted", workload="ns/a1")
    await publish(bus, in_partition(fact("finished", "ns/a1"), old))
    await drained(bus, "admission-0")


async def b1_goes_before_a2(bus: Bus, events: EventLog, partition: int, *, shard: int) -> None:
    """With a2 (team a) pending and c1 filling the queue in `partition`, b1 (team b) asks
    after a2; once c1 finishes, shard `shard` admits b1, not a2: a1's usage counts."""
    await publish(bus, in_partition(submitted(workload("b1", cpu="2", queue="b")), partition))
    await events.wait_for("pending", workload="ns/b1")
    await publish(bus, in_partition(fact("finished", "ns/c1"), partition))
    assert (await events.wait_for("admitted", workload="ns/b1")).source == f"admission/{shard}"
    await drained(bus, f"admission-{shard}")
    assert count(events, "admitted", "ns/a2") == 0


@asynccontextmanager
async def moved_once(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> AsyncIterator[tuple[list[Any], str, str]]:
    """Two replicas (the list, and the cohorts shards 0 and 1 decide): team a used the queue
    in shard 0's cohort, then the ClusterQueue joined shard 1's, where c1 (team c) fills it."""
    here, there = trees()
    new = partition_of(f"cohort/{there}")
    settings = {"shards": 2, "lease_ttl_s": UNEXPIRING_LEASE_S, "kueue": FAIR}
    replicas = [await start_admission(bus_config, shard=i, **settings) for i in range(2)]
    try:
        await asyncio.gather(*(r.wait_serving() for r in replicas))
        await team_a_used_the_queue(bus, events, here)
        await publish(bus, config_applied(shared_queue(there)))
        await publish(bus, in_partition(submitted(workload("c1", cpu="2", queue="c")), new))
        assert (await events.wait_for("admitted", workload="ns/c1")).source == "admission/1"
        yield replicas, here, there
    finally:
        for r in replicas:
            await r.stop()


@pytest.mark.parametrize("snapshot", ["kept", "lost"])
async def test_a_moved_local_queue_brings_its_finished_workloads_usage_restart_safe(
    bus: Bus, bus_config: BusConfig, events: EventLog, snapshot: str
) -> None:
    async with moved_once(bus, bus_config, events) as (replicas, _, there):
        new = partition_of(f"cohort/{there}")
        # Shard 1 dies and rebuilds: from the snapshot it wrote on its way out, or (its
        # snapshot lost, as if it died before writing one) from the stream alone.
        await replicas[1].kill()
        if snapshot == "lost":
            await (await bus.js.object_store(SNAPSHOTS_BUCKET)).delete("admission-1")
        settings = {"shards": 2, "lease_ttl_s": UNEXPIRING_LEASE_S, "kueue": FAIR}
        replicas[1] = await start_admission(bus_config, shard=1, **settings)
        await replicas[1].wait_serving()

        # Team a asks before team b; with a1's usage carried over, b1 goes first.
        await publish(bus, in_partition(submitted(workload("a2", cpu="2", queue="a")), new))
        await events.wait_for("pending", workload="ns/a2")
        await b1_goes_before_a2(bus, events, new, shard=1)
