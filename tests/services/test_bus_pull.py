"""PullFeed against a real nats-server: order across requests, a bounded buffer, deletion."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from bus_helpers import SUBMITTED, submitted
from nats.js import api

from muster.bus import EVENTS_STREAM, Bus, Retry
from muster.bus.pull import ConsumerDeletedError, PullFeed

pytestmark = pytest.mark.timeout(30)


async def durable(bus: Bus, name: str, *, ack: api.AckPolicy = api.AckPolicy.EXPLICIT) -> None:
    config = api.ConsumerConfig(durable_name=name, ack_policy=ack, filter_subject=SUBMITTED)
    await bus.js.add_consumer(EVENTS_STREAM, config=config)


async def started(bus: Bus, name: str, *, batch: int, expires_s: float = 1.0) -> PullFeed:
    feed = PullFeed(bus.nc, stream=EVENTS_STREAM, consumer=name, batch=batch, expires_s=expires_s)
    await feed.start()
    return feed


async def test_messages_come_in_stream_order_across_many_requests(bus: Bus) -> None:
    for i in range(25):
        await bus.publish(submitted(f"ns/w{i}"))
    await durable(bus, "reader")
    feed = await started(bus, "reader", batch=4)
    got: list[int] = []
    while len(got) < 25:
        msgs = await feed.take(10, timeout_s=5)
        assert msgs, "nothing came"
        assert len(msgs) <= 10
        for msg in msgs:
            got.append(msg.metadata.sequence.stream)
            await msg.ack()
    assert got == list(range(1, 26))
    assert await feed.close() == []


async def test_a_reader_that_does_not_take_holds_about_one_batch(bus: Bus) -> None:
    for i in range(60):
        await bus.publish(submitted(f"ns/w{i}"))
    await durable(bus, "slow", ack=api.AckPolicy.NONE)  # nothing holds the server back
    feed = await started(bus, "slow", batch=8)
    await asyncio.sleep(0.5)
    assert 0 < feed.buffered <= 8
    got: list[int] = []
    while len(got) < 60:  # taking makes room: the rest follows
        got += [m.metadata.sequence.stream for m in await feed.take(100, timeout_s=5)]
    assert got == list(range(1, 61))
    await feed.close()


@pytest.mark.parametrize("waiting", [True, False], ids=["first-request", "renewed-request"])
async def test_a_deleted_consumer_ends_the_feed(bus: Bus, waiting: bool) -> None:
    await durable(bus, "doomed")
    feed = await started(bus, "doomed", batch=4, expires_s=0.5)
    if not waiting:
        await asyncio.sleep(0.7)  # the first request expired: deletion meets its successor
    await bus.js.delete_consumer(EVENTS_STREAM, "doomed")
    with pytest.raises(ConsumerDeletedError):
        await feed.take(4, timeout_s=10)
    await feed.close()


async def test_gather_returns_at_its_count_or_at_its_deadline_with_fewer(bus: Bus) -> None:
    await durable(bus, "gathering")
    feed = await started(bus, "gathering", batch=16)
    loop = asyncio.get_running_loop()
    for i in range(3):
        await bus.publish(submitted(f"ns/w{i}"))
    await feed.gather(3, until=loop.time() + 600)  # the count: long before the deadline
    assert feed.buffered == 3
    await bus.publish(submitted("ns/w3"))
    await feed.gather(100, until=loop.time() + 0.05)  # never 100: the deadline ends it
    got = [m.metadata.sequence.stream for m in await feed.take(100, timeout_s=5)]
    assert got[:3] == [1, 2, 3]
    assert got == list(range(1, len(got) + 1))
    await feed.close()


async def test_a_gather_outlasting_its_pull_request_renews_it_and_goes_on(bus: Bus) -> None:
    # A stretched round (admission, one of N shards) gathers for up to its bound; a request
    # expiring meanwhile must neither end the gather early nor stop the deliveries.
    await durable(bus, "outlasting")
    feed = await started(bus, "outlasting", batch=16, expires_s=0.2)
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def later() -> None:
        await asyncio.sleep(0.5)  # past two of the feed's requests, expired unfilled
        for i in range(3):
            await bus.publish(submitted(f"ns/w{i}"))

    publishing = asyncio.create_task(later())
    await feed.gather(3, until=began + 20)
    await publishing
    assert feed.buffered == 3
    assert loop.time() - began < 20  # the count ended it, not the deadline
    got = [m.metadata.sequence.stream for m in await feed.take(100, timeout_s=0)]
    assert got == [1, 2, 3]
    await feed.close()


async def test_a_feed_asks_again_once_reconnected_not_when_its_lost_request_would_expire(
    bus: Bus, restart_nats: Callable[[], None]
) -> None:
    await durable(bus, "reader")  # stored on disk: it outlives the restart
    feed = await started(bus, "reader", batch=4, expires_s=600)
    restart_nats()  # the feed's request goes with the connection
    while True:  # the bus reconnects on its own; JetStream serves a moment later
        try:
            await bus.publish(submitted("ns/after"))
            break
        except Retry:
            await asyncio.sleep(0.1)  # bounded by the test's timeout
    (msg,) = await feed.take(4, timeout_s=20)  # not the 600 s a lost request would wait
    assert msg.subject == SUBMITTED
    await feed.close()
