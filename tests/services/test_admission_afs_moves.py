"""Admission fair sharing across a tree's move, on a real nats-server: a LocalQueue whose
ClusterQueue joins a cohort another replica decides brings what its finished workloads used
(the replica that takes it reads it from the old partition's history), and that replica,
restarted, still orders by it: from its snapshot, or without one from the record it wrote."""

from __future__ import annotations

import asyncio
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


@pytest.mark.parametrize("snapshot", ["kept", "lost"])
async def test_a_moved_local_queue_brings_its_finished_workloads_usage_restart_safe(
    bus: Bus, bus_config: BusConfig, events: EventLog, snapshot: str
) -> None:
    here, there = trees()  # decided by shard 0, by shard 1
    old, new = partition_of(f"cohort/{here}"), partition_of(f"cohort/{there}")
    settings = {"shards": 2, "lease_ttl_s": UNEXPIRING_LEASE_S, "kueue": FAIR}
    replicas = [await start_admission(bus_config, shard=i, **settings) for i in range(2)]
    try:
        await asyncio.gather(*(r.wait_serving() for r in replicas))
        queues = [local_queue(name, cq="shared") for name in "abc"]
        await publish(bus, *map(config_applied, (flavor(), shared_queue(here), *queues)))
        # Team a used the whole queue on shard 0; a1 finished there: only its history says so.
        await publish(bus, in_partition(submitted(workload("a1", cpu="2", queue="a")), old))
        await events.wait_for("admitted", workload="ns/a1")
        await publish(bus, in_partition(fact("finished", "ns/a1"), old))
        await drained(bus, "admission-0")

        # The ClusterQueue joins a cohort of shard 1's; c1 (team c) then fills the queue.
        await publish(bus, config_applied(shared_queue(there)))
        await publish(bus, in_partition(submitted(workload("c1", cpu="2", queue="c")), new))
        assert (await events.wait_for("admitted", workload="ns/c1")).source == "admission/1"
        # Shard 1 dies and rebuilds: from the snapshot it wrote on its way out, or (its
        # snapshot lost, as if it died before writing one) from the stream alone.
        await replicas[1].kill()
        if snapshot == "lost":
            await (await bus.js.object_store(SNAPSHOTS_BUCKET)).delete("admission-1")
        replicas[1] = await start_admission(bus_config, shard=1, **settings)
        await replicas[1].wait_serving()

        # Team a asks before team b; with a1's usage carried over, b1 goes first.
        await publish(bus, in_partition(submitted(workload("a2", cpu="2", queue="a")), new))
        await events.wait_for("pending", workload="ns/a2")
        await publish(bus, in_partition(submitted(workload("b1", cpu="2", queue="b")), new))
        await events.wait_for("pending", workload="ns/b1")
        await publish(bus, in_partition(fact("finished", "ns/c1"), new))
        assert (await events.wait_for("admitted", workload="ns/b1")).source == "admission/1"
        await drained(bus, "admission-1")
        assert count(events, "admitted", "ns/a2") == 0
    finally:
        for r in replicas:
            await r.stop()
