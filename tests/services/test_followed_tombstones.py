"""MUSTER_PARTITIONS and MUSTER_CLUSTERS bounded by what lives (docs/events.md, "Tombstones
that expire"): a deleted LocalQueue's partition and a heartbeat part past a shorter room's
count are deleted with a tombstone that a follower sees live and that then expires; `muster
nats-setup` removes the ones left before."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    config_deleted,
    eventually,
    flavor,
    local_queue,
    publish,
    running,
    start_admission,
)
from cluster_rooms import room

from muster.bus import Bus, BusConfig
from muster.bus.buckets import PARTITIONS_BUCKET
from muster.bus.kv import follow_bucket
from muster.bus.partitions import QueuePartitions, queue_key
from muster.bus.permissions import Deployment
from muster.bus.setup import setup_nats
from muster.core.dispatch import ClusterCapacity
from muster.core.heartbeat_parts import RoomReader, encode_room
from muster.gangpermit.room_writer import RoomWriter

pytestmark = pytest.mark.timeout(90)

CLUSTERS_BUCKET = "MUSTER_CLUSTERS"


async def keys(bus: Bus, bucket: str) -> list[str]:
    """Every key whose last message the bucket's stream holds: live ones and tombstones."""
    return await (await bus.kv(bucket)).keys()


async def messages(bus: Bus, bucket: str) -> int:
    return int((await bus.js.stream_info(f"KV_{bucket}")).state.messages)


@contextlib.asynccontextmanager
async def following(task: asyncio.Task[None]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_deleted_local_queue_leaves_its_follower_and_then_the_bucket(
    bus: Bus, bus_config: BusConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("muster.admission.service.FOLLOWED_TOMBSTONES_KEPT_S", 1.0)
    await publish(
        bus,
        config_applied(flavor()),
        config_applied(cluster_queue(cpu="1")),
        config_applied(local_queue("kept")),
        config_applied(local_queue("gone")),
    )
    follower = QueuePartitions()  # as the gateway and the watcher follow the bucket
    gone, kept = queue_key("ns", "gone"), queue_key("ns", "kept")
    async with (
        running(await start_admission(bus_config)) as (admission,),
        following(asyncio.create_task(follower.follow(bus.kv))),
    ):
        await admission.wait_serving()

        async def both_known() -> bool:
            return {gone, kept} <= follower._known.keys()

        await eventually(both_known)
        await publish(bus, config_deleted("LocalQueue", "ns/gone"))

        async def forgotten_by_follower() -> bool:
            return gone not in follower._known

        await eventually(forgotten_by_follower)
        assert follower.of("ns", "kept") == str(follower._known[kept])

        async def only_live_keys() -> bool:
            return await keys(bus, PARTITIONS_BUCKET) == [kept]

        await eventually(only_live_keys, timeout_s=20)
        assert await messages(bus, PARTITIONS_BUCKET) == 1


async def test_a_part_past_a_shorter_room_leaves_its_follower_and_then_the_bucket(
    bus: Bus,
) -> None:
    """A room of many nodes in parts shrinks to one value: its parts go, a follower takes the
    small room whole, and the parts' tombstones expire."""
    kv = await bus.kv(CLUSTERS_BUCKET)
    max_bytes = 16 * 1024
    writer = RoomWriter("east", tombstones_kept_s=1.0)
    large = ClusterCapacity(cluster="east", nodes=tuple(room(i) for i in range(400)))
    small = ClusterCapacity(cluster="east", nodes=tuple(room(i) for i in range(3)))
    taken: list[ClusterCapacity] = []
    reader = RoomReader()

    def heard(key: str, value: bytes | None) -> None:
        found = reader.heard(key, value)
        if isinstance(found, ClusterCapacity):
            taken.append(found)

    async with following(asyncio.create_task(follow_bucket(bus.kv, CLUSTERS_BUCKET, heard))):
        heartbeat = encode_room(large, max_bytes=max_bytes)
        assert len(heartbeat.parts) >= 3
        await writer.write(kv, heartbeat)

        async def large_taken() -> bool:  # else a follower that starts late sees only the small
            return bool(taken) and len(taken[-1].nodes) == 400

        await eventually(large_taken)
        await writer.write(kv, encode_room(small, max_bytes=max_bytes, last=heartbeat))

        async def small_taken() -> bool:
            return bool(taken) and len(taken[-1].nodes) == 3

        await eventually(small_taken)

        async def head_alone() -> bool:
            return await keys(bus, CLUSTERS_BUCKET) == ["east"]

        await eventually(head_alone, timeout_s=20)
        assert await messages(bus, CLUSTERS_BUCKET) == 1
        assert [len(t.nodes) for t in taken] == [400, 3]


async def test_nats_setup_removes_old_partition_and_part_tombstones(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tombstones of before (plain deletes, kept for good) go at `muster nats-setup` once older
    than their time; a key written again after its delete keeps that write."""
    partitions, clusters = await bus.kv(PARTITIONS_BUCKET), await bus.kv(CLUSTERS_BUCKET)
    for key in ("lq.ns.a", "lq.ns.b"):
        await partitions.put(key, b"3")
        await partitions.delete(key)
    await partitions.put("lq.ns.b", b"5")
    await clusters.put("east", b"{}")
    await clusters.put("east.part.0", b"{}")
    await clusters.delete("east.part.0")
    monkeypatch.setattr("muster.bus.setup.FOLLOWED_TOMBSTONES_KEPT_S", 0.0)
    done = await setup_nats(bus.js, deployment=Deployment())
    assert f"1 old tombstones of {PARTITIONS_BUCKET} removed" in done
    assert f"1 old tombstones of {CLUSTERS_BUCKET} removed" in done
    assert await partitions.keys() == ["lq.ns.b"]
    assert await clusters.keys() == ["east"]
