"""Readers that outlive NATS: a nats-server restarted mid-test (same port, same store), and
consumers the server deleted; setting up (a bucket) waits for a server that is away."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import msgspec
import pytest
from admission_world import eventually
from budget import wait_s
from bus_helpers import PENDING, Recorder, consuming, pending
from nats_process import NatsServer

from muster.bus import EVENTS_STREAM, Bus, BusConfig, connect
from muster.contracts.v1.events_pb2 import Envelope

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def following(bus: Bus, subjects: list[str]) -> AsyncIterator[Recorder]:
    """A `replay(follow=True)` of `subjects` into a Recorder; fails the test if it ended."""
    got = Recorder()

    async def follow() -> None:
        async for env in bus.replay(subjects, follow=True):
            await got(env)

    task = asyncio.create_task(follow())
    try:
        yield got
    finally:
        ended = task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not ended, f"the replay ended: {task.exception() if not task.cancelled() else ''}"


async def test_a_following_replay_reads_on_in_order_across_a_nats_server_restart(
    bus: Bus, restart_nats: Callable[[], None]
) -> None:
    await bus.publish_all(pending("ns/a", str(i)) for i in range(3))
    async with following(bus, [PENDING]) as got:
        await got.wait_for_count(3)
        restart_nats()  # deletes the replay's in-memory consumer
        await publish_when_back(bus, [pending("ns/a", str(i)) for i in range(3, 6)])
        seen = await got.wait_for_count(6, timeout_s=20)
    assert [e.sequence for e in seen] == [1, 2, 3, 4, 5, 6]  # none lost, none twice
    assert [e.pending.message for e in seen] == [str(i) for i in range(6)]


async def test_a_deleted_durable_is_made_again_after_the_last_message_handled(
    bus: Bus,
) -> None:
    handler = Recorder()
    await bus.publish_all([pending("ns/a", "a"), pending("ns/b", "b")])
    async with consuming(bus, "gone", [PENDING], handler) as task:
        await handler.wait_for_count(2)
        await bus.js.delete_consumer(EVENTS_STREAM, "gone")
        await bus.publish(pending("ns/c", "c"))
        got = await handler.wait_for_count(3, timeout_s=20)
        info = await bus.js.consumer_info(EVENTS_STREAM, "gone")
        assert not task.done()
    # Made again at "c": "a" and "b" were handled, and are not delivered again (a consumer
    # made anew from the stream's start would have).
    assert info.config.opt_start_seq == 3
    assert [e.pending.message for e in got] == ["a", "b", "c"]


async def publish_when_back(bus: Bus, envs: list[Envelope], *, timeout_s: float = 15.0) -> None:
    """Publish `envs` once the client has reconnected (publishing retries until it has)."""

    async def publish() -> None:
        for env in envs:
            while True:
                try:
                    await bus.publish(env)
                    break
                except Exception:  # not connected again yet: try again
                    await asyncio.sleep(0.1)

    await asyncio.wait_for(publish(), timeout_s)


async def test_a_bucket_opened_while_nats_server_restarts_is_opened_once_it_is_back(
    bus_config: BusConfig, nats_process: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    # What a service does as it starts (the gateway, admission after its lease); a request
    # NATS does not answer fails in 0.5 s here, as one the restart swallowed does in 5 s.
    quick = msgspec.structs.replace(bus_config, publish_timeout_s=0.5)
    bus = await connect(quick)
    try:
        nats_process.stop()
        opening = asyncio.create_task(bus.kv("MUSTER_TEST_RESTART"))

        async def told() -> bool:
            if opening.done():
                opening.result()  # it gave up (raises), or NATS answered while it was away
                raise AssertionError("opened while nats-server was away")
            return "NATS does not answer" in caplog.text

        await eventually(told)
        nats_process.start()
        bucket = await asyncio.wait_for(opening, wait_s(None))
        await bucket.put("k", b"v")
        stored = await bucket.get("k")
        assert stored is not None
        assert stored.value == b"v"
    finally:
        await bus.close()
