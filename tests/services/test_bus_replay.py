"""Replaying stream history in order, following new events, and key-value buckets."""

from __future__ import annotations

import asyncio

import pytest
from bus_helpers import PENDING, SUBMITTED, EventLog, pending, submitted

from muster.bus import EVENTS_STREAM, Bus
from muster.bus.subjects import workload_subject
from muster.contracts.v1.events_pb2 import Envelope

pytestmark = pytest.mark.timeout(30)


async def collect(
    bus: Bus, subjects: list[str], *, from_sequence: int = 1, until_sequence: int | None = None
) -> list[Envelope]:
    found = bus.replay(subjects, from_sequence=from_sequence, until_sequence=until_sequence)
    return [env async for env in found]


async def test_replay_returns_history_in_order_from_a_sequence(bus: Bus) -> None:
    await bus.publish_all(pending("ns/a", str(i)) for i in range(10))
    got = await collect(bus, [PENDING], from_sequence=4)
    assert [e.sequence for e in got] == list(range(4, 11))
    assert [e.pending.message for e in got] == [str(i) for i in range(3, 10)]


async def test_replay_stops_at_until_sequence(bus: Bus) -> None:
    await bus.publish_all(pending("ns/a", str(i)) for i in range(10))
    got = await collect(bus, [PENDING], from_sequence=2, until_sequence=5)
    assert [e.sequence for e in got] == [2, 3, 4, 5]


async def test_replay_reads_only_the_given_subjects(bus: Bus) -> None:
    await bus.publish_all([submitted("ns/a"), pending("ns/a", "0"), submitted("ns/b")])
    got = await collect(bus, [SUBMITTED])
    assert [(e.sequence, e.workload) for e in got] == [(1, "ns/a"), (3, "ns/b")]
    both = await collect(bus, [SUBMITTED, PENDING])
    assert [e.sequence for e in both] == [1, 2, 3]


async def test_replay_of_an_empty_history_ends_at_once(bus: Bus) -> None:
    assert await collect(bus, [PENDING]) == []
    await bus.publish(submitted("ns/a"))
    assert await collect(bus, [PENDING]) == []  # the stream's last message is not ours
    assert await collect(bus, [SUBMITTED], from_sequence=2) == []


async def test_replay_stops_at_the_last_sequence_when_it_started(bus: Bus) -> None:
    await bus.publish_all(pending("ns/a", str(i)) for i in range(5))
    replay = bus.replay([PENDING])
    first = await anext(replay)
    await bus.publish_all(pending("ns/a", str(i)) for i in range(5, 8))
    rest = [env async for env in replay]
    assert [e.sequence for e in [first, *rest]] == [1, 2, 3, 4, 5]


async def test_replay_skips_what_it_cannot_decode(bus: Bus) -> None:
    await bus.publish(pending("ns/a", "0"))
    await bus.js.publish(PENDING, b"garbage \xff")
    await bus.publish(pending("ns/a", "2"))
    got = await collect(bus, [PENDING])
    assert [e.sequence for e in got] == [1, 3]


async def test_replay_with_follow_streams_new_events(bus: Bus) -> None:
    await bus.publish(pending("ns/a", "old"))
    got: list[Envelope] = []
    changed = asyncio.Condition()

    async def watch() -> None:
        async for env in bus.replay([workload_subject("*", ">")], follow=True):
            async with changed:
                got.append(env)
                changed.notify_all()

    task = asyncio.create_task(watch())
    try:
        async with changed:
            await asyncio.wait_for(changed.wait_for(lambda: len(got) == 1), 5)
        await bus.publish_all([submitted("ns/b"), pending("ns/b", "new")])
        async with changed:
            await asyncio.wait_for(changed.wait_for(lambda: len(got) == 3), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [e.sequence for e in got] == [1, 2, 3]


async def test_the_events_fixture_waits_for_an_event(bus: Bus, events: EventLog) -> None:
    await bus.publish(pending("ns/a", "0"))
    env = await events.wait_for("pending", workload="ns/a", timeout_s=5)
    assert env.sequence == 1


async def test_last_sequence_counts_every_subject(bus: Bus) -> None:
    assert await bus.last_sequence(EVENTS_STREAM) == 0
    await bus.publish_all([submitted("ns/a"), pending("ns/a", "0")])
    assert await bus.last_sequence() == 2


async def test_kv_round_trip_and_reopen(bus: Bus) -> None:
    kv = await bus.kv("MUSTER_VISIBILITY")
    revision = await kv.put("cq.team-a", b"status")
    again = await bus.kv("MUSTER_VISIBILITY")  # exists now: opened, not created
    entry = await again.get("cq.team-a")
    assert entry is not None
    assert entry.value == b"status"
    assert entry.revision == revision


async def test_kv_bucket_is_created_with_ttl_and_history(bus: Bus) -> None:
    kv = await bus.kv("MUSTER_SHARDS", ttl_s=5, history=3)
    status = await kv.status()
    assert status.ttl_s == 5
    assert status.history == 3
