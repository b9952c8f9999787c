"""An in-order batch consumer: fetch what is there, hand it over as one batch, then ack it all.

Admission's engine is one state machine: a LocalQueue created just before a workload arrives
must be applied before it. `Bus.consume` runs a lane per workload, which keeps one workload's
events in order but not events of different workloads (configuration included), so admission
consumes with `consume_in_order`: what has arrived (up to `batch` messages, in stream order)
is one batch (a round), and its messages are acked only after the handler returned (admission's
returns once every event the round caused has its PubAck). The durable acks all
(`AckPolicy.ALL`): one ack of a batch's last message answers for the whole batch, instead of
one ack per message for the client and the server to send and track. And it answers for the
batches before it: a handled batch's ack waits up to `ACK_LINGER_S` for the next batch, whose
ack is then the only one sent (for up to half the durable's `max_ack_pending` messages; an ack
is sent at once beyond that, and when the loop stops). Events come a few milliseconds apart to
a replica that owns a quarter of the trees, and its rounds hold one or two: an ack each was a
message, a write and a wake-up per round. Waiting changes nothing the server redelivers (the
ack wait is 30 s) nor what a new owner replays (it rebuilds from the stream).

An event that cannot be read or applied is copied to `MUSTER_DLQ` and terminated (the bus's
dead-letter path), once its batch is handled, so that no ack covers an event before it is
applied; nothing is nak'ed, since a redelivery would come out of order. A copy that cannot be
stored is made again, after a growing pause, until it is: left unanswered, the event would be
answered by the next batch's ack (the durable acks all) without ever reaching the dead-letter
stream, lost without a trace. The consumer waits meanwhile, as every publish of its rounds
would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

from muster.bus.cancel import raise_if_cancelling
from muster.bus.client import stream_sequence
from muster.bus.connection import Bus
from muster.bus.consumer import ConsumerSettings, consumer_config
from muster.bus.envelope import decode_stored
from muster.bus.errors import Reject, Retry, wrapped
from muster.bus.pull import PullFeed
from muster.contracts.v1 import events_pb2 as pb
from muster.metrics.bus import ACK, DEAD_LETTER

log = logging.getLogger(__name__)

ACK_LINGER_S = 0.05  # a handled batch's ack waits this long for the next batch's (docstring)
DEAD_LETTER_RETRY_S = (0.1, 5.0)  # a failed dead-letter copy is made again after: first, most


class Gather(NamedTuple):
    """Bounded coalescing of batches: a batch starts no sooner than `gap_s` after the one
    before started, nor sooner than `stretch` times as long as that one took to handle (at most
    `stretch_most_s`), unless `fill` messages wait by then; a message that comes later is
    taken at once. A consumer that owns a small share of a busy stream otherwise handles a
    message or two per batch, and each batch has its fixed costs (a wake-up for the delivery
    and one for the PubAcks of what it caused); under a stream of messages this makes its
    batches larger, at the price of at most the gap more latency.

    The stretch is for one of N consumers sharing a stream's work (admission's shards): with
    `stretch` N its batches last about as long as those of a lone consumer of the whole stream,
    so they hold about as many messages and the fixed costs divide by N as the messages do.
    Nothing waits while the consumer is idle: the first message after a batch wakes it as it
    would have, and only it (and what follows it within the gap) waits for the gap's end."""

    gap_s: float
    fill: int
    stretch: float = 0.0
    stretch_most_s: float = 0.0

    def next_at(self, started: float, handled_s: float) -> float:
        """The earliest (loop) time of the next batch, the last started at `started` and
        handled in `handled_s`."""
        stretched = min(self.stretch * handled_s, self.stretch_most_s)
        return started + max(self.gap_s, stretched)


# The envelopes of a batch, and the same as stored (the snapshot log keeps those bytes).
BatchHandler = Callable[[Sequence[pb.Envelope], Sequence[bytes]], Awaitable[list[Reject | None]]]


async def make_consumer(
    bus: Bus,
    durable: str,
    subjects: Sequence[str],
    settings: ConsumerSettings,
    *,
    start_sequence: int,
    inactive_s: float | None = None,
) -> None:
    """Make durable `durable` anew: over `subjects` (the partitions this replica decides, which
    change), starting at stream sequence `start_sequence` (just after its rebuild); with
    `inactive_s`, the server deletes it once nobody pulled from it for that long.
    `Unavailable` when NATS fails."""
    await delete_consumer(bus, settings.stream, durable)
    with wrapped(f"consumer {durable}"):
        config = consumer_config(durable, subjects, settings)
        config.ack_policy = api.AckPolicy.ALL  # one ack per batch (the module docstring)
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = start_sequence
        config.inactive_threshold = inactive_s
        await bus.js.add_consumer(settings.stream, config=config)


async def delete_consumer(bus: Bus, stream: str, durable: str) -> None:
    """Delete durable `durable` of `stream` if it exists. `Unavailable` when NATS fails."""
    with wrapped(f"consumer {durable}"), contextlib.suppress(nats.js.errors.NotFoundError):
        await bus.js.delete_consumer(stream, durable)


async def consume_in_order(
    bus: Bus,
    durable: str,
    handle: BatchHandler,
    settings: ConsumerSettings,
    *,
    fetch_timeout_s: float = 1.0,
    gather: Gather | None = None,
    name: str = "",
) -> None:
    """Fetch, handle and ack batches of durable `durable` (`make_consumer`) until cancelled;
    with `gather`, batches that follow each other closely are coalesced (`Gather`). `name`:
    what its dead letters, metrics and watchdog call it, when not `durable` (admission's
    durable of a term is known by its shard's name).

    Cancelled while a batch is being handled, it lets that batch finish and acks it first.
    The loop runs in a task of its own, made once and shielded: the caller's cancellation is
    passed on to it only while it waits for messages, and otherwise once the batch is
    handled. (Shielding each batch instead costs a task per batch: two more hand-offs
    between tasks per round, which a replica with a round per event feels.)
    """
    where = _Where()
    loop = asyncio.ensure_future(
        _consume(
            bus,
            durable,
            handle,
            settings,
            fetch_timeout_s=fetch_timeout_s,
            gather=gather,
            where=where,
            name=name or durable,
        )
    )
    try:
        await asyncio.shield(loop)
    except asyncio.CancelledError:
        where.stopping = True
        if not where.handling:
            loop.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await loop  # stopping: what the last batch raised is not the caller's any more
        raise


class _Where:
    """Whether the loop is handling a batch, and whether it must stop once that is done."""

    handling = False
    stopping = False


async def _consume(
    bus: Bus,
    durable: str,
    handle: BatchHandler,
    settings: ConsumerSettings,
    *,
    fetch_timeout_s: float,
    gather: Gather | None,
    where: _Where,
    name: str,
) -> None:
    feed = PullFeed(
        bus.nc,
        stream=settings.stream,
        consumer=durable,
        batch=settings.batch,
        expires_s=settings.request_expiry_s,
    )
    await feed.start()
    acks = _Acks(limit=max(1, settings.max_ack_pending // 2))  # the server stops at the max
    tracker = bus.progress.track(
        name, stream=settings.stream, consumer=durable, max_ack_pending=settings.max_ack_pending
    )
    clock = asyncio.get_running_loop().time
    next_at = -math.inf  # no batch starts before this (loop time) unless `gather.fill` wait
    try:
        async with bus.following_lag(settings.stream, durable, label=name):
            while True:
                raise_if_cancelling()
                wait_s = fetch_timeout_s if acks.due is None else ACK_LINGER_S
                msgs = await feed.take(settings.batch, timeout_s=wait_s)
                if not msgs:
                    await acks.send()  # none came meanwhile: the last batch's goes alone
                    continue
                where.handling = True  # taken: a cancellation lets it be handled first
                try:
                    if gather is not None and clock() < next_at:
                        msgs += await _gathered(feed, gather, len(msgs), settings, next_at)
                    started = clock()
                    batch = stream_sequence(msgs[0])
                    tracker.began(batch)
                    try:
                        with tracker.handling(batch):
                            await _handle_batch(bus, name, msgs, handle, settings, acks)
                    finally:
                        tracker.ended(batch)
                finally:
                    where.handling = False
                if gather is not None:
                    next_at = gather.next_at(started, clock() - started)
                if where.stopping:
                    raise asyncio.CancelledError
                if acks.full:
                    await acks.send()
    finally:
        bus.progress.forget(tracker)
        await acks.send()  # what was handled is answered before the loop goes
        # Delivered but never handled: not naked, since a redelivery would come out of order
        # (after what follows it); the ack wait hands them to the next owner, which skips
        # what it already applied.
        await feed.close()
        with contextlib.suppress(nats.errors.Error):
            await bus.nc.flush()  # the acks leave before the caller goes on


async def _gathered(
    feed: PullFeed, gather: Gather, taken: int, settings: ConsumerSettings, until: float
) -> list[Msg]:
    """What joins the `taken` messages of a batch by `until` (or once `gather.fill` wait): the
    deliveries meanwhile are buffered without waking the loop."""
    room = settings.batch - taken
    if room <= 0 or taken >= gather.fill:
        return []
    await feed.gather(gather.fill - taken, until=until)
    return await feed.take(room, timeout_s=0)


class _Acks:
    """The ack owed for the batches handled since the last one sent: of the last message
    handled (`AckPolicy.ALL`), sent by `send`."""

    def __init__(self, *, limit: int) -> None:
        self.due: Msg | None = None
        self.limit = limit  # handled messages left unacked at most
        self.handled = 0

    @property
    def full(self) -> bool:
        return self.handled >= self.limit

    def after(self, answer: _Answer) -> None:
        """Take a handled batch's `_Answer`: its ack replaces the one owed; a term sent
        for its last message answered for all."""
        if answer.ack is not None:
            self.due = answer.ack
            self.handled += answer.messages
        elif answer.answered:
            self.due, self.handled = None, 0

    async def send(self) -> None:
        if self.due is not None:
            due, self.due, self.handled = self.due, None, 0
            await _quietly(due.ack())


class _Answer(NamedTuple):
    """What a handled batch leaves to answer: `ack` (None when nothing) covering `messages`;
    `answered`: its last message was terminated, which answered for all before."""

    ack: Msg | None
    messages: int
    answered: bool = False


async def _handle_batch(
    bus: Bus,
    name: str,
    msgs: Sequence[Msg],
    handle: BatchHandler,
    settings: ConsumerSettings,
    acks: _Acks,
) -> None:
    readable: list[tuple[int, pb.Envelope]] = []  # index in `msgs`, envelope
    refused: dict[int, str] = {}  # index in `msgs` -> why it goes to the dead-letter stream
    for i, msg in enumerate(msgs):
        try:
            env = decode_stored(msg.data, subject=msg.subject, max_bytes=settings.max_event_bytes)
        except Reject as err:
            refused[i] = str(err)
            continue
        env.sequence = stream_sequence(msg)
        readable.append((i, env))
    started = time.perf_counter()
    outcomes = await handle([env for _, env in readable], [msgs[i].data for i, _ in readable])
    if bus.metrics is not None:
        bus.metrics.consumed_batch(
            name,
            [env.type for _, env in readable],
            [ACK if outcome is None else DEAD_LETTER for outcome in outcomes],
            time.perf_counter() - started,
        )
    for (i, env), outcome in zip(readable, outcomes, strict=True):
        if outcome is not None:
            log.error("rejected: %s", outcome, extra={"workload": env.workload, "event": env.type})
            refused[i] = str(outcome)
    acks.after(await _answer(bus, name, msgs, refused))


async def _answer(bus: Bus, durable: str, msgs: Sequence[Msg], refused: dict[int, str]) -> _Answer:
    """Dead-letter the `refused` messages of a handled batch in order; what is left to ack.

    An ack or a term answers for every message before it too (`AckPolicy.ALL`)."""
    for i in sorted(refused):
        await _dead_letter(bus, durable, msgs[i], refused[i])
    if len(msgs) - 1 in refused:  # its term answered for the batch
        return _Answer(None, len(msgs), answered=True)
    return _Answer(msgs[-1], len(msgs))


async def _dead_letter(bus: Bus, durable: str, msg: Msg, reason: str) -> None:
    """Copy `msg` to the DLQ, then terminate it; a copy that fails is made again until stored
    (module docstring)."""
    pause_s, most_s = DEAD_LETTER_RETRY_S
    while True:
        try:
            await bus.publisher.dead_letter(msg, consumer=durable, reason=reason)
            break
        except Retry as err:
            log.error(
                "cannot dead-letter, trying again in %gs: %s", pause_s, err,
                extra={"consumer": durable},
            )  # fmt: skip
        await asyncio.sleep(pause_s)
        pause_s = min(pause_s * 2, most_s)
    await _quietly(msg.term())


async def _quietly(reply: Awaitable[None]) -> None:
    try:
        await reply
    except nats.errors.Error as exc:  # redelivered later; the rounds skip what they applied
        log.warning("could not answer the server for a message: %r", exc)
