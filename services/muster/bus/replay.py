"""Ordered reads of stream history: state rebuilds (admission) and `Events.Watch` (gateway),
and under them the key-value buckets' watches and change feeds (bus/kv.py).

`read_in_order` reads with an ephemeral, unacknowledged pull consumer that starts at a given
sequence (or at each subject's last message), through a `PullFeed`.
It checks each message's consumer sequence; on a gap (a pull lost in a reconnect) it makes a new
consumer from the last sequence it yielded, so every message comes once and in stream order.
The same when the server deletes the consumer (an in-memory consumer does not outlive a
nats-server restart): a reader outlives NATS restarts and outages, waiting with back-off while
the server is away (`outage.Outage`), and ends only when its caller stops it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from muster.bus.cancel import raise_if_cancelling
from muster.bus.client import Position, position
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES, decode_stored
from muster.bus.errors import Reject
from muster.bus.outage import UNAVAILABLE, Outage
from muster.bus.progress import Tracker, advanced
from muster.bus.pull import REQUEST_EXPIRY_S, ConsumerDeletedError, PullFeed
from muster.contracts.v1.events_pb2 import Envelope

log = logging.getLogger(__name__)

_BATCH = 256
_FETCH_TIMEOUT_S = 1.0  # a follow looks again this often while nothing comes
_INACTIVE_THRESHOLD_S = 60.0  # the server removes a reader's consumer this long after it left


async def last_sequence(js: JetStreamContext, stream: str) -> int:
    """The sequence of the last message stored in `stream` (0 when it never held one)."""
    info = await js.stream_info(stream)
    return int(info.state.last_seq)


def replay(
    nc: NatsClient,
    js: JetStreamContext,
    subjects: Sequence[str],
    *,
    stream: str,
    from_sequence: int = 1,
    until_sequence: int | None = None,
    follow: bool = False,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    tracker: Tracker | None = None,
) -> AsyncIterator[Envelope]:
    """Yield the envelopes on `subjects` in `stream` from `from_sequence` on, in stream order.

    Without `follow` it stops at `until_sequence`, or at the stream's last sequence when called
    if that is None. With `follow` it waits for new messages (up to `until_sequence` if given).
    Each envelope has `sequence` set. Undecodable messages are logged and skipped.
    With `tracker`, each envelope is in hand until the caller asks for the next (the watchdog
    judges whether the caller's work moves, bus/progress.py); it is closed when the replay ends.
    """
    if not subjects:
        raise ValueError("replay: no subjects")
    envs = _replay(
        nc, js, subjects, stream=stream, from_sequence=from_sequence,
        until_sequence=until_sequence, follow=follow, max_event_bytes=max_event_bytes,
        tracker=tracker,
    )  # fmt: skip
    return envs


async def _replay(
    nc: NatsClient,
    js: JetStreamContext,
    subjects: Sequence[str],
    *,
    stream: str,
    from_sequence: int,
    until_sequence: int | None,
    follow: bool,
    max_event_bytes: int,
    tracker: Tracker | None,
) -> AsyncIterator[Envelope]:
    outage = Outage(f"replay of {stream}", logger=log)
    until = until_sequence
    while until is None and not follow:
        try:
            until = await last_sequence(js, stream)
        except UNAVAILABLE as exc:
            await outage.failed(exc)
    reads = read_in_order(
        nc, js, subjects, stream=stream, start=max(1, from_sequence), until=until,
        follow=follow, tracker=tracker,
    )  # fmt: skip
    try:
        async with contextlib.aclosing(reads):
            async for read in reads:
                if read is None:  # nothing stored after the start
                    if follow:
                        continue
                    return
                msg, at = read
                try:
                    env = decode_stored(msg.data, subject=msg.subject, max_bytes=max_event_bytes)
                except Reject as err:
                    log.warning("replay skips %s#%d: %s", msg.subject, at.stream, err)
                else:
                    env.sequence = at.stream
                    advanced()  # a handler reading the stream (a rebuild) is not stuck
                    if tracker is None:
                        yield env
                    else:  # in hand until the next is asked for (`progress.tracked`, inline:
                        # a wrapping generator costs a resumption more per event)
                        tracker.began(at.stream)
                        yield env
                        tracker.ended(at.stream)
                if not follow and at.pending == 0:
                    return  # caught up: what is left was stored after the call
    finally:
        if tracker is not None:
            tracker.close()


# One read: a message and where it stands; None: a reader began with nothing to deliver.
Read = tuple[Msg, Position] | None


async def read_in_order(
    nc: NatsClient,
    js: JetStreamContext,
    subjects: Sequence[str],
    *,
    stream: str,
    start: int | None,
    until: int | None = None,
    follow: bool = True,
    tracker: Tracker | None = None,
) -> AsyncGenerator[Read, None]:
    """The messages on `subjects` in `stream` in stream order, each once, from sequence `start`
    (None: each subject's last message, then every later one) up to `until` (None: no end),
    across NATS restarts and outages (the module docstring); without `follow`, until caught
    up. A reader that begins with nothing to deliver says so with None (a caller learns it
    has read all that was stored). `tracker.consumer` names the reader of the moment.

    A reader made again starts after the last message handed over; before any was, it starts
    where the first one did (never at the stream's start, which would hand over again what
    the caller had before `start`). One from each subject's last that had not caught up yet
    starts at each subject's last again and skips what was handed over: from the next sequence
    it would hand over messages their subject has replaced since (a bucket keeping several
    writes per key)."""
    outage = Outage(f"ordered read of {stream}", logger=log)
    next_seq = start
    lasts = start is None  # reading each subject's last message, not caught up yet
    while until is None or next_seq is None or next_seq <= until:
        begin = None if lasts else next_seq
        try:
            reader = await _Reader.start(nc, js, subjects, stream=stream, from_sequence=begin)
        except UNAVAILABLE as exc:
            await outage.failed(exc)
            continue
        outage.recovered()
        if tracker is not None:
            tracker.consumer = reader.name
        failed: BaseException | None = None
        try:
            if reader.pending == 0:
                lasts = False
                yield None
                if not follow:
                    return
            async for msg, at in reader.messages(follow=follow):
                if until is not None and at.stream > until:
                    return
                if at.pending == 0:
                    lasts = False
                if next_seq is not None and at.stream < next_seq:  # handed over before
                    if at.pending == 0:
                        yield None  # caught up with nothing new: all stored was read
                    continue
                next_seq = at.stream + 1
                yield msg, at
            if not reader.gap:
                return
        except ConsumerDeletedError:
            where = "each subject's last" if lasts else next_seq
            log.info("ordered read of %s: reader gone; reading on from %s", stream, where)
            reader.gone = True
        except UNAVAILABLE as exc:  # a pull the connection failed (a server going away)
            failed, reader.gone = exc, True  # the server drops it unread; asking would wait
        finally:
            await reader.close()
        if failed is not None:
            await outage.failed(failed)
        # A gap in consumer sequences, or no consumer: read again from the message after the
        # last one handed over.


class _Reader:
    """One ephemeral ordered consumer; `messages` ends when caught up or at a gap (`gap`)."""

    def __init__(self, js: JetStreamContext, feed: PullFeed, info: api.ConsumerInfo) -> None:
        self._js = js
        self._feed = feed
        self._info = info
        self.name = info.name or ""
        self.pending = int(info.num_pending or 0)
        self.gap = False
        self.gone = False  # deleted, or lost with the connection: nothing to delete

    @classmethod
    async def start(
        cls,
        nc: NatsClient,
        js: JetStreamContext,
        subjects: Sequence[str],
        *,
        stream: str,
        from_sequence: int | None,
    ) -> _Reader:
        """A reader from `from_sequence` (None: each subject's last message first)."""
        one = len(subjects) == 1
        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT
            if from_sequence is None
            else api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=from_sequence,
            ack_policy=api.AckPolicy.NONE,
            max_deliver=1,
            filter_subject=subjects[0] if one else None,
            filter_subjects=None if one else list(subjects),
            inactive_threshold=_INACTIVE_THRESHOLD_S,
            num_replicas=1,
            mem_storage=True,
        )
        info = await js.add_consumer(stream, config=config)
        assert info.name is not None  # the server names an ephemeral consumer
        feed = PullFeed(
            nc, stream=stream, consumer=info.name, batch=_BATCH, expires_s=REQUEST_EXPIRY_S
        )
        await feed.start()
        return cls(js, feed, info)

    async def messages(self, *, follow: bool) -> AsyncIterator[tuple[Msg, Position]]:
        expected = 1
        while True:
            raise_if_cancelling()
            msgs = await self._feed.take(_BATCH, timeout_s=_FETCH_TIMEOUT_S)
            if not msgs:
                if not follow and await self._caught_up():
                    return
                continue
            for msg in msgs:
                at = position(msg)
                if at.consumer != expected:
                    log.info("replay: consumer sequence gap, reading again")
                    self.gap = True
                    return
                expected += 1
                yield msg, at

    async def _caught_up(self) -> bool:
        try:
            info = await self._js.consumer_info(self._info.stream_name, self._info.name)
        except nats.js.errors.NotFoundError:
            raise ConsumerDeletedError(self._info.stream_name, self._info.name) from None
        except UNAVAILABLE:  # away for now: ask again after the next empty take
            return False
        return not info.num_pending

    async def close(self) -> None:
        """Stop reading; delete the consumer unless it is `gone` (or NATS is away)."""
        await self._feed.close()  # unacknowledged reads: what was not taken needs no answer
        if self.gone:
            return
        with contextlib.suppress(*UNAVAILABLE):
            await self._js.delete_consumer(self._info.stream_name, self._info.name)
