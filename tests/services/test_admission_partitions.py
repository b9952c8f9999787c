"""Partitions: a replica reads only its own trees' events, and a tree moves between replicas
safely while work flows (docs/events.md, "Partitions")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from admission_world import (
    UNEXPIRING_LEASE_S,
    Running,
    cluster_queue,
    config_applied,
    count,
    drained,
    durable_info,
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

from muster.admission.moves import move_partition
from muster.bus import Bus, BusConfig
from muster.bus.partitions import partition_of
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)

SHARDS = 2


def config_of(*cohorts: str, cpu: str = "4") -> list[pb.Envelope]:
    out = [config_applied(flavor())]
    for cohort in cohorts:
        out.append(config_applied(cluster_queue(f"cq-{cohort}", cpu=cpu, cohort=cohort)))
        out.append(config_applied(local_queue(f"lq-{cohort}", cq=f"cq-{cohort}")))
    return out


async def delivered(bus: Bus, durable: str) -> int:
    """How many messages the server delivered to consumer `durable` so far."""
    info = await durable_info(bus, durable)
    assert info.delivered is not None
    return int(info.delivered.consumer_seq)


async def test_a_replica_receives_no_event_of_a_tree_it_does_not_decide(
    bus: Bus, bus_config: BusConfig, events: Any
) -> None:
    mine, theirs = trees()
    replicas = [
        await start_admission(bus_config, shard=i, shards=SHARDS, lease_ttl_s=UNEXPIRING_LEASE_S)
        for i in range(SHARDS)
    ]
    try:
        await asyncio.gather(*(r.wait_serving() for r in replicas))
        await publish(bus, *config_of(mine, theirs))
        for durable in ("admission-0", "admission-1"):
            await drained(bus, durable)
        before = await delivered(bus, "admission-0")
        other = partition_of(f"cohort/{theirs}")
        work = [
            in_partition(submitted(workload(f"w{i}", queue=f"lq-{theirs}")), other)
            for i in range(12)
        ]
        await publish(bus, *work)
        await events.wait_for("admitted", workload="ns/w3")
        await events.wait_for("pending", workload="ns/w11")
        await publish(bus, *(in_partition(fact("finished", f"ns/w{i}"), other) for i in range(4)))
        await events.wait_for("admitted", workload="ns/w7")
        for durable in ("admission-0", "admission-1"):
            await drained(bus, durable)

        assert await delivered(bus, "admission-0") == before  # not one of them
        assert await delivered(bus, "admission-1") >= 12 + 4
        decided = {e.source for e in events.seen if e.type == "workload.admitted"}
        assert decided == {"admission/1"}
    finally:
        for r in replicas:
            await r.stop()


async def test_a_tree_moved_between_replicas_under_load_admits_nothing_twice_and_loses_nothing(
    bus: Bus, bus_config: BusConfig, events: Any
) -> None:
    tree, _ = trees()
    partition = partition_of(f"cohort/{tree}")
    old, new = partition % SHARDS, (partition + 1) % SHARDS
    replicas: dict[int, Running] = {
        i: await start_admission(bus_config, shard=i, shards=SHARDS) for i in range(SHARDS)
    }
    keys = [f"ns/w{i}" for i in range(24)]
    try:
        await asyncio.gather(*(r.wait_serving() for r in replicas.values()))
        await publish(bus, *config_of(tree))
        queue = f"lq-{tree}"
        await publish(
            bus,
            *(in_partition(submitted(workload(k[3:], queue=queue)), partition) for k in keys),
        )
        moved_at = 0
        for i, key in enumerate(keys):  # one cpu each, 4 of quota: FIFO, 4 at a time
            await events.wait_for("admitted", workload=key)
            await publish(bus, in_partition(fact("finished", key), partition))
            if i == 4:  # the move, while 4 run and 19 wait
                moved_at = await move_partition(bus, partition, new)
            elif i == 6:  # the old owner dies and comes back after the move
                await replicas[old].kill()
                replicas[old] = await start_admission(bus_config, shard=old, shards=SHARDS)
            elif i == 12:  # and so does the new owner, while it decides the tree
                await replicas[new].kill()
                replicas[new] = await start_admission(bus_config, shard=new, shards=SHARDS)
        for r in replicas.values():
            await r.wait_serving()
        for durable in ("admission-0", "admission-1"):
            await drained(bus, durable)

        for key in keys:
            assert count(events, "admitted", key) == 1
        late = [
            e.source for e in events.seen if e.type == "workload.admitted" and e.sequence > moved_at
        ]
        assert set(late) == {f"admission/{new}"}  # nothing of the old owner's after the move
    finally:
        for r in replicas.values():
            await r.stop()


async def created(bus: Bus, durable: str) -> object:
    """When consumer `durable` was made: a replica makes it anew at each rebuild."""
    return (await durable_info(bus, durable)).created


async def test_after_a_move_each_replica_rebuilds_once_not_at_every_batch(
    bus: Bus, bus_config: BusConfig, events: Any
) -> None:
    tree, _ = trees()
    partition = partition_of(f"cohort/{tree}")
    new = (partition + 1) % SHARDS
    replicas = [
        await start_admission(bus_config, shard=i, shards=SHARDS, lease_ttl_s=UNEXPIRING_LEASE_S)
        for i in range(SHARDS)
    ]
    queue = f"lq-{tree}"
    try:
        await asyncio.gather(*(r.wait_serving() for r in replicas))
        await publish(bus, *config_of(tree))
        await move_partition(bus, partition, new)
        await publish(bus, in_partition(submitted(workload("w0", queue=queue)), partition))
        await events.wait_for("admitted", workload="ns/w0")
        for durable in ("admission-0", "admission-1"):
            await drained(bus, durable)
        made = {d: await created(bus, d) for d in ("admission-0", "admission-1")}

        for i in range(1, 4):  # one batch each, after both replicas rebuilt for the move
            await publish(bus, in_partition(submitted(workload(f"w{i}", queue=queue)), partition))
            await events.wait_for("admitted", workload=f"ns/w{i}")
        for durable in ("admission-0", "admission-1"):
            await drained(bus, durable)

        assert {d: await created(bus, d) for d in made} == made
        late = {e.source for e in events.seen if e.type == "workload.admitted"}
        assert late == {f"admission/{new}"}
    finally:
        for r in replicas:
            await r.stop()
