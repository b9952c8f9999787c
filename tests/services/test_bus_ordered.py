"""Admission's in-order consumer (`muster.bus.ordered`) against a real nats-server: batches
handled one after another are answered by one ack, sent once no batch follows."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from admission_world import drained, eventually
from bus_helpers import SUBMITTED, submitted
from nats.aio.msg import Msg

from muster.bus import EVENTS_STREAM, Bus, ConsumerSettings, Reject
from muster.bus.ordered import Gather, consume_in_order, make_consumer
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(30)


async def test_batches_handled_back_to_back_share_one_ack_sent_once_none_follows(
    bus: Bus,
) -> None:
    for i in range(6):
        await bus.publish(submitted(f"ns/w{i}"))
    settings = ConsumerSettings(stream=EVENTS_STREAM, batch=2)  # 3 batches at least
    await make_consumer(bus, "in-order", [SUBMITTED], settings, start_sequence=1)
    acks: list[int] = []  # the stream sequence each ack answers for

    async def seen(msg: Msg) -> None:
        # $JS.ACK.<stream>.<consumer>.<delivered>.<stream sequence>.<consumer sequence>...
        acks.append(int(msg.subject.split(".")[5]))

    # The server reads acks on their reply subjects; a plain subscriber sees them too.
    watcher = await bus.nc.subscribe(f"$JS.ACK.{EVENTS_STREAM}.in-order.>", cb=seen)
    handled: list[int] = []

    async def handle(envs: Sequence[pb.Envelope], raw: Sequence[bytes]) -> list[Reject | None]:
        handled.extend(env.sequence for env in envs)
        return [None] * len(envs)

    loop = asyncio.create_task(consume_in_order(bus, "in-order", handle, settings))
    try:
        await drained(bus, "in-order", timeout_s=10)  # the owed ack went once none followed
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    await bus.nc.flush()
    await watcher.unsubscribe()
    assert handled == [1, 2, 3, 4, 5, 6]
    assert acks == [6]  # one ack, of the last, answered for every batch


async def test_cancelled_while_handling_the_batch_finishes_and_is_acked_before_it_stops(
    bus: Bus,
) -> None:
    for i in range(3):
        await bus.publish(submitted(f"ns/w{i}"))
    settings = ConsumerSettings(stream=EVENTS_STREAM, batch=8)
    await make_consumer(bus, "in-order", [SUBMITTED], settings, start_sequence=1)
    started, release = asyncio.Event(), asyncio.Event()
    finished: list[int] = []

    async def handle(envs: Sequence[pb.Envelope], raw: Sequence[bytes]) -> list[Reject | None]:
        started.set()
        await release.wait()  # a round's decisions waiting for their PubAcks
        finished.extend(env.sequence for env in envs)
        return [None] * len(envs)

    loop = asyncio.create_task(consume_in_order(bus, "in-order", handle, settings))
    await started.wait()
    loop.cancel()
    await asyncio.sleep(0)  # the cancellation reached the loop, mid-batch
    assert not loop.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await loop
    # The batch it was handling: all three, or (a loaded server delivers a fetch in parts)
    # the first of them; none after it is started once cancelled.
    assert finished
    assert finished == list(range(1, len(finished) + 1))

    # Acked before the loop ended; the server applies an ack after the connection's flush,
    # asynchronously (a consumer info right after has been seen one step behind, under load).
    async def acked() -> bool:
        info = await bus.js.consumer_info(EVENTS_STREAM, "in-order")
        return bool(info.ack_floor.stream_seq == finished[-1])

    await eventually(acked, timeout_s=5)  # the loop has ended: only its ack can do it


@pytest.mark.parametrize(
    "gather",
    [
        # The gap outlasts the test: only the fill can start the second batch.
        Gather(gap_s=600.0, fill=5),
        # No gap, but a stretch that makes the first batch's millisecond outlast the test.
        Gather(gap_s=0.0, fill=5, stretch=1e6, stretch_most_s=600.0),
    ],
    ids=["gap", "stretch"],
)
async def test_with_gather_a_stream_of_events_comes_as_one_batch_once_enough_wait(
    bus: Bus, gather: Gather
) -> None:
    await bus.publish(submitted("ns/w0"))
    settings = ConsumerSettings(stream=EVENTS_STREAM, batch=16)
    await make_consumer(bus, "in-order", [SUBMITTED], settings, start_sequence=1)
    batches: list[list[int]] = []
    first = asyncio.Event()

    async def handle(envs: Sequence[pb.Envelope], raw: Sequence[bytes]) -> list[Reject | None]:
        batches.append([env.sequence for env in envs])
        if not first.is_set():
            await asyncio.sleep(0.001)  # the first batch's length, which the stretch multiplies
        first.set()
        return [None] * len(envs)

    loop = asyncio.create_task(consume_in_order(bus, "in-order", handle, settings, gather=gather))
    try:
        await first.wait()  # the first event found the loop idle: taken at once, alone
        for i in range(1, 6):  # each stored before the next is sent: a trickle
            await bus.publish(submitted(f"ns/w{i}"))
        await drained(bus, "in-order", timeout_s=10)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert batches == [[1], [2, 3, 4, 5, 6]]
