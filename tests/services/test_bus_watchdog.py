"""The progress watchdog (bus/watchdog.py) against a real nats-server: admission's in-order
consumer, a consume loop's handler and a service's watched follow replay, each wedged by the
test, are told as stalled (liveness False, one log line naming them); the same loops moving
(a long handler that says it advances), or idle, are not."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest
from bus_helpers import SUBMITTED, submitted
from prometheus_client import CollectorRegistry

from muster.bus import EVENTS_STREAM, Bus, ConsumerSettings, Reject
from muster.bus.kv import follow_bucket
from muster.bus.ordered import consume_in_order, make_consumer
from muster.bus.progress import advanced
from muster.bus.watchdog import watch_progress
from muster.contracts.v1 import events_pb2 as pb
from muster.metrics.bus import BusMetrics

pytestmark = pytest.mark.timeout(30)

STALL_S = 0.5


class Liveness:
    """What the watchdog tells: every change, and an event per verdict to wait for."""

    def __init__(self) -> None:
        self.told: list[bool] = []
        self.dead = asyncio.Event()
        self.alive_again = asyncio.Event()

    def __call__(self, alive: bool) -> None:
        if not self.told or self.told[-1] != alive:
            self.told.append(alive)
        if not alive:
            self.dead.set()
        elif self.dead.is_set():
            self.alive_again.set()


@contextlib.asynccontextmanager
async def watched(bus: Bus) -> AsyncIterator[Liveness]:
    liveness = Liveness()
    task = asyncio.create_task(
        watch_progress(bus, stall_s=STALL_S, alive=liveness, ready=lambda: True)
    )
    try:
        yield liveness
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_in_order_batch_that_never_returns_is_a_stall(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    bus.metrics = BusMetrics(registry, service="admission")
    await bus.publish(submitted("ns/a"))
    settings = ConsumerSettings(stream=EVENTS_STREAM)
    await make_consumer(bus, "admission-0", [SUBMITTED], settings, start_sequence=1)
    wedged, release = asyncio.Event(), asyncio.Event()

    async def handle(envs: Sequence[pb.Envelope], raw: Sequence[bytes]) -> list[Reject | None]:
        wedged.set()
        await release.wait()  # a round waiting for what does not come until the test ends
        return [None] * len(envs)

    async with watched(bus) as liveness:
        loop = asyncio.create_task(consume_in_order(bus, "admission-0", handle, settings))
        try:
            await asyncio.wait_for(wedged.wait(), 10)
            await asyncio.wait_for(liveness.dead.wait(), 10)
        finally:
            release.set()  # a cancelled in-order consumer lets its batch finish first
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    assert liveness.told == [True, False]
    assert "consumer admission-0 stalled: 1 message waiting" in caplog.text
    series = {"service": "admission", "consumer": "admission-0"}
    assert registry.get_sample_value("muster_consumer_stalled", series) == 1
    stuck_s = registry.get_sample_value("muster_consumer_stuck_seconds", series)
    assert stuck_s is not None
    assert stuck_s >= STALL_S


# A reader the watchdog judges: how the test writes what it reads (by name), and what it reads.
Reader = tuple[Callable[[str], Awaitable[object]], Callable[[], AsyncIterator[str]]]


async def follow_replay(bus: Bus) -> Reader:
    """A service's main follow replay (binder's specs)."""

    async def names() -> AsyncIterator[str]:
        async for env in bus.replay([SUBMITTED], follow=True, watched="binder-specs"):
            yield env.workload.removeprefix("ns/")

    return lambda name: bus.publish(submitted(f"ns/{name}")), names


async def bucket_feed(bus: Bus) -> Reader:
    """A sim cluster reader's change feed."""
    kv = await bus.kv("MUSTER_SIM_local")

    async def names() -> AsyncIterator[str]:
        async for change in kv.changes("pod."):
            yield change.key.removeprefix("pod.")

    return lambda name: kv.write(f"pod.{name}", b"1", last=0), names


@pytest.mark.parametrize("make_reader", [follow_replay, bucket_feed])
async def test_a_watched_reader_that_hangs_is_a_stall_and_moves_again_once_it_reads(
    bus: Bus, make_reader: Callable[[Bus], Awaitable[Reader]]
) -> None:
    write, names = await make_reader(bus)
    await write("a")
    await write("b")
    release, all_read = asyncio.Event(), asyncio.Event()
    read: list[str] = []

    async def follow() -> None:
        async for name in names():
            read.append(name)
            if len(read) == 3:
                all_read.set()
            if name == "a":
                await release.wait()  # the service's apply, wedged until the test lets go

    async with watched(bus) as liveness:
        reader = asyncio.create_task(follow())
        try:
            await asyncio.wait_for(liveness.dead.wait(), 10)
            assert read == ["a"]
            release.set()
            await write("c")
            await asyncio.wait_for(liveness.alive_again.wait(), 10)
            await asyncio.wait_for(all_read.wait(), 10)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    assert liveness.told == [True, False, True]
    assert read == ["a", "b", "c"]
    assert bus.progress.trackers() == []  # the reader ended: no longer watched


async def test_idle_watched_follows_consumers_and_bucket_feeds_stay_alive(bus: Bus) -> None:
    await bus.publish(submitted("ns/a"))
    kv = await bus.kv("MUSTER_SIM_local")
    await kv.write("pod.a", b"1", last=0)
    handled, loaded = asyncio.Event(), asyncio.Event()

    async def handle(env: pb.Envelope) -> None:
        handled.set()

    async def follow() -> None:
        async for _ in bus.replay([SUBMITTED], follow=True, watched="follow"):
            pass

    async def feed() -> None:
        async for _ in kv.changes("pod."):
            pass

    async with watched(bus) as liveness:
        loops = [
            asyncio.create_task(bus.consume("binder", [SUBMITTED], handle)),
            asyncio.create_task(follow()),
            asyncio.create_task(feed()),
            asyncio.create_task(
                follow_bucket(bus.kv, "MUSTER_SIM_local", lambda *_: None, on_loaded=loaded.set)
            ),
        ]
        try:
            await asyncio.wait_for(handled.wait(), 10)
            await asyncio.wait_for(loaded.wait(), 10)
            assert len(bus.progress.trackers()) == 4  # every one is watched
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(liveness.dead.wait(), 4 * STALL_S)
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
    assert liveness.told == [True]


async def test_a_consumed_handler_that_advances_is_not_a_stall_and_the_next_that_hangs_is(
    bus: Bus,
) -> None:
    await bus.publish(submitted("ns/long"))
    await bus.publish(submitted("ns/hung"))
    hung, release = asyncio.Event(), asyncio.Event()

    async def handle(env: pb.Envelope) -> None:
        if env.workload == "ns/long":
            for _ in range(12):  # 2.4 stall windows of work that says it moves
                await asyncio.sleep(0.1)
                advanced()
        else:
            hung.set()
            await release.wait()  # wedged until the test lets go

    async with watched(bus) as liveness:
        # One lane: the hung handler's message follows the long one's on the same task.
        loop = asyncio.create_task(bus.consume("binder", [SUBMITTED], handle, lanes=1))
        try:
            await asyncio.wait_for(liveness.dead.wait(), 10)
            assert hung.is_set()  # the long handler was not taken for a stall
        finally:
            release.set()
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    assert liveness.told == [True, False]
