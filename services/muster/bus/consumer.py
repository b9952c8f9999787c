"""The consume loop: a durable pull consumer whose messages run through handlers in lanes.

One workload's events always go to the same lane and run there one at a time, in stream order;
different workloads run in parallel, one handler per lane at most. The loop acks a message only
after its handler returned (handlers publish, and wait for PubAcks, before returning), the ack
leaving with the connection's next write (`ConsumerSettings.ack_linger_s` at most), naks on
`Retry` or a bug, and dead-letters on `Reject`, on undecodable data and at the last delivery.
Processes consuming with the same durable name share its messages (replicas scale that way).
The loop outlives NATS: it waits out an outage with back-off, and when the server has deleted
its consumer it creates it again from the first message it has not handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import zlib
from collections.abc import Awaitable, Callable, Sequence

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from opentelemetry import trace

from muster.bus.cancel import raise_if_cancelling
from muster.bus.client import ack_soon, delivery
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES, decode_stored
from muster.bus.errors import Reject, Retry
from muster.bus.keepalive import KeepAlive
from muster.bus.lanes import Lane
from muster.bus.outage import UNAVAILABLE, Outage
from muster.bus.progress import Tracker
from muster.bus.publisher import Publisher
from muster.bus.pull import REQUEST_EXPIRY_S, ConsumerDeletedError, PullFeed
from muster.bus.subjects import EVENTS_STREAM, check_token
from muster.bus.tracing import continue_trace
from muster.contracts.v1.events_pb2 import Envelope

log = logging.getLogger(__name__)

Handler = Callable[[Envelope], Awaitable[None]]
"""What a service gives `Bus.consume`: handles one event; returns once its effects are stored."""


class ConsumerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How one durable consumer pulls and runs its handler."""

    stream: str = EVENTS_STREAM
    lanes: int = 8  # handlers running at once, at most; one workload always uses the same lane
    max_ack_pending: int = 256  # messages delivered but not yet acked, across all replicas
    max_deliver: int = 20  # deliveries before a failing message is dead-lettered
    ack_wait_s: float = 30.0  # the server redelivers a message unacked this long (kept alive)
    batch: int = 64  # messages per fetch, at most
    fetch_timeout_s: float = 2.0  # the loop looks after its lanes this often while idle
    request_expiry_s: float = REQUEST_EXPIRY_S  # a pull request waits this long at the server
    backoff_s: float = 0.5  # first delay after a handler bug; doubles per delivery
    max_backoff_s: float = 30.0
    deliver_new: bool = False  # a new durable starts at the stream's end, not its beginning
    drain_timeout_s: float = 10.0  # once cancelled, running handlers get this long to finish
    # A handled message's ack waits this long at most for a write the connection makes anyway
    # (0: written at once); a quarter of `max_ack_pending` waiting goes at once.
    ack_linger_s: float = 0.05
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES

    def __post_init__(self) -> None:
        if self.lanes < 1 or self.max_ack_pending < 1 or self.batch < 1:
            raise ValueError("lanes, max_ack_pending and batch must be >= 1")
        if self.fetch_timeout_s <= 0 or self.request_expiry_s <= 0:
            raise ValueError("fetch_timeout_s and request_expiry_s must be > 0")
        if self.max_deliver == 0 or self.max_deliver < -1:
            raise ValueError("max_deliver must be >= 1, or -1 for unlimited")
        if not 0 <= self.ack_linger_s < self.ack_wait_s:
            raise ValueError("ack_linger_s must be >= 0 and below ack_wait_s")


def consumer_config(
    durable: str, subjects: Sequence[str], settings: ConsumerSettings
) -> api.ConsumerConfig:
    """The JetStream config of durable pull consumer `durable` over `subjects`."""
    check_token(durable, what="durable consumer name")
    if not subjects:
        raise ValueError(f"consumer {durable}: no subjects to consume")
    one = len(subjects) == 1
    return api.ConsumerConfig(
        name=durable,
        durable_name=durable,
        deliver_policy=api.DeliverPolicy.NEW if settings.deliver_new else api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        max_ack_pending=settings.max_ack_pending,
        filter_subject=subjects[0] if one else None,
        filter_subjects=None if one else list(subjects),
    )


async def consume(
    nc: NatsClient,
    js: JetStreamContext,
    publisher: Publisher,
    durable: str,
    subjects: Sequence[str],
    handler: Handler,
    settings: ConsumerSettings,
    *,
    tracker: Tracker | None = None,
) -> None:
    """Create or update durable `durable`, then handle its messages until cancelled.

    On cancellation it stops pulling, gives back (naks) what no handler has started, lets
    running handlers finish for up to `settings.drain_timeout_s`, then re-raises; past that,
    or cancelled again, it cancels those handlers (their messages are naked and redelivered).
    While NATS is away it waits; when the server deleted the consumer, it makes it again,
    starting at the first message this process has not handled (or, never having handled
    one, as `settings` says). `tracker` is told what is in hand (bus/progress.py).
    """
    if tracker is None:  # not watched: told all the same
        tracker = Tracker(durable, stream=settings.stream, consumer=durable, max_ack_pending=1)
    config = consumer_config(durable, subjects, settings)
    outage = Outage(f"consumer {durable}", logger=log)
    resume_from = 0
    while True:
        raise_if_cancelling()
        feed = PullFeed(
            nc,
            stream=settings.stream,
            consumer=durable,
            batch=min(settings.batch, settings.max_ack_pending),
            expires_s=settings.request_expiry_s,
        )
        try:
            await ensure_consumer(js, settings.stream, config, resume_from=resume_from)
            await feed.start()
        except UNAVAILABLE as exc:
            await feed.close()
            await outage.failed(exc)
            continue
        outage.recovered()
        loop = _ConsumeLoop(nc, feed, publisher, durable, handler, settings, tracker)
        try:
            await loop.run()
        except ConsumerDeletedError:
            resume_from = loop.resume_from or resume_from
            log.warning(
                "consumer %s was deleted; creating it again from sequence %s",
                durable,
                resume_from or "its start",
            )


async def ensure_consumer(
    js: JetStreamContext, stream: str, config: api.ConsumerConfig, *, resume_from: int = 0
) -> None:
    """Create durable `config` on `stream`, or bring an existing one's settings up to date.

    With `resume_from`, a consumer created here starts at that stream sequence. An existing one
    keeps where it starts (the server cannot change that): a replica that re-created it after
    a deletion chose it, and a replica starting later must not fail on it.
    """
    if resume_from:
        config = dataclasses.replace(
            config, deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=resume_from
        )
    try:
        await js.add_consumer(stream, config=config)
    except nats.js.errors.APIError as exc:
        if exc.err_code != _DELIVER_POLICY_FIXED or config.durable_name is None:
            raise
        existing = (await js.consumer_info(stream, config.durable_name)).config
        kept = dataclasses.replace(
            config,
            deliver_policy=existing.deliver_policy,
            opt_start_seq=existing.opt_start_seq,
            opt_start_time=existing.opt_start_time,
        )
        await js.add_consumer(stream, config=kept)


_DELIVER_POLICY_FIXED = 10012  # JetStream: "deliver policy can not be updated"


_Item = tuple[Msg, Envelope, int]  # a message queued on a lane: its envelope, its deliveries


class _ConsumeLoop:
    def __init__(
        self,
        nc: NatsClient,
        feed: PullFeed,
        publisher: Publisher,
        durable: str,
        handler: Handler,
        settings: ConsumerSettings,
        tracker: Tracker,
    ) -> None:
        self._nc = nc
        self._feed = feed
        self._publisher = publisher
        self._durable = durable
        self._handler = handler
        self._settings = settings
        self._tracker = tracker
        self._queues: list[Lane[_Item | None]] = [Lane() for _ in range(settings.lanes)]
        self._in_flight = 0
        self._room: asyncio.Future[None] | None = None  # the pull waits on it for room
        self._ack_batch = max(1, settings.max_ack_pending // 4)  # acks written at once
        self._stopping = False
        self._open: set[int] = set()  # stream sequences delivered here and not handled yet
        self._keep = KeepAlive(settings.ack_wait_s)  # what is in hand, told in progress
        self._last = 0  # the highest stream sequence delivered here

    @property
    def resume_from(self) -> int:
        """The first stream sequence not handled here (0: none was delivered)."""
        if self._open:
            return min(self._open)
        return self._last + 1 if self._last else 0

    async def run(self) -> None:
        self._keep.start()
        lanes = [
            asyncio.create_task(self._lane(q), name=f"{self._durable}/lane-{i}")
            for i, q in enumerate(self._queues)
        ]
        try:
            await self._pull_forever(lanes)
        finally:
            # Stop deliveries before handing messages back: a nak while a pull request is still
            # waiting at the server comes straight back into it, where no one reads it until
            # the ack wait runs out.
            try:
                for msg in await self._feed.close():
                    await _quietly(msg.nak())
                await self._drain(lanes)  # what still runs is kept alive meanwhile
            finally:
                self._keep.stop()  # cancelled again while draining too: no tick outlives it
            self._tracker.clear()
            with contextlib.suppress(nats.errors.Error):
                await self._nc.flush()  # the acks and naks leave before the caller goes on

    async def _pull_forever(self, lanes: list[asyncio.Task[None]]) -> None:
        while True:
            raise_if_cancelling()
            for lane in lanes:
                if lane.done():  # lanes catch every handler error: this is a bug in the loop
                    raise RuntimeError(f"consumer {self._durable}: {lane.get_name()} stopped")
            room = await self._wait_for_room()
            msgs = await self._feed.take(
                min(self._settings.batch, room), timeout_s=self._settings.fetch_timeout_s
            )
            for msg in msgs:
                rejected = self._dispatch(msg)
                if rejected is not None:
                    await self._dead_letter(msg, rejected)

    async def _wait_for_room(self) -> int:
        """How many more messages may be in hand, waiting until at least one may."""
        limit = self._settings.max_ack_pending
        while self._in_flight >= limit:
            room = self._room = asyncio.get_running_loop().create_future()
            try:
                await room
            finally:
                self._room = None
        return limit - self._in_flight

    def _release(self) -> None:
        """One message less in hand: wake the pull if it waits for room."""
        self._in_flight -= 1
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)

    def _dispatch(self, msg: Msg) -> str | None:
        """Decode `msg` and queue it on its workload's lane; what cannot be decoded is not
        queued: returns why, for the caller to dead-letter it (a coroutine per message
        otherwise)."""
        try:
            env = decode_stored(
                msg.data, subject=msg.subject, max_bytes=self._settings.max_event_bytes
            )
        except Reject as err:
            log.error(
                "dead-lettering %s#%d: %s",
                msg.subject,
                delivery(msg).stream,
                err,
                extra={"consumer": self._durable},
            )
            return str(err)
        env.sequence, delivered = delivery(msg)
        self._open.add(env.sequence)
        self._last = max(self._last, env.sequence)
        self._tracker.began(env.sequence)
        self._keep.held[env.sequence] = msg
        lane = zlib.crc32(env.workload.encode()) % len(self._queues)
        self._in_flight += 1
        self._queues[lane].put((msg, env, delivered))
        return None

    async def _lane(self, queue: Lane[_Item | None]) -> None:
        cursor = self._tracker.cursor()  # `advanced()` in a handler advances its message
        cursor.enter()
        held = self._keep.held
        while (item := await queue.get()) is not None:
            msg, env, delivered = item
            try:
                if self._stopping:  # not started before shutdown: let another replica have it
                    await _quietly(msg.nak())
                else:
                    cursor.token = env.sequence
                    await self._handle(msg, env, delivered)
                    self._open.discard(env.sequence)
            finally:
                cursor.token = 0
                held.pop(env.sequence, None)
                self._tracker.ended(env.sequence)
                self._release()

    async def _drain(self, lanes: list[asyncio.Task[None]]) -> None:
        self._stopping = True
        for queue in self._queues:
            queue.put(None)
        try:
            _, late = await asyncio.wait(lanes, timeout=self._settings.drain_timeout_s)
        except asyncio.CancelledError:
            late = set(lanes)  # cancelled again while draining: stop now
            raise
        finally:
            if late:
                log.warning(
                    "%d handlers still running after %gs; cancelling them",
                    sum(not lane.done() for lane in late),
                    self._settings.drain_timeout_s,
                    extra={"consumer": self._durable},
                )
            for lane in late:
                lane.cancel()
            results = await asyncio.gather(*lanes, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def _handle(self, msg: Msg, env: Envelope, delivered: int) -> None:
        """Run the handler on one message (its `delivered`th delivery), then ack, nak or
        dead-letter it."""
        last = 0 < self._settings.max_deliver <= delivered
        if env.traceparent:  # what muster's publisher also writes as the trace headers
            headers = {"traceparent": env.traceparent, "tracestate": env.tracestate}
        else:  # the headers are read only here (`DirectMsg`): most events never need them
            headers = msg.headers or {}
        with continue_trace(
            headers,
            f"handle {env.type}",
            kind=trace.SpanKind.CONSUMER,
            attributes=lambda: {
                "messaging.system": "nats",
                "messaging.destination.name": msg.subject,
                "messaging.consumer.group.name": self._durable,
                "messaging.message.id": env.event_id,
                "muster.workload": env.workload,
                "muster.sequence": env.sequence,
                "muster.deliveries": delivered,
            },
        ) as span:
            try:
                await self._handler(env)  # kept alive meanwhile (`KeepAlive`)
            except Retry as err:
                if last:
                    reason = f"still failing after {delivered}: {err}"
                    log.error("dead-lettering: %s", reason, extra=self._fields(env))
                    await self._dead_letter(msg, reason)
                else:
                    log.info("retrying later: %s", err, extra=self._fields(env))
                    await _quietly(msg.nak(delay=err.delay_s))
            except Reject as err:
                log.error("rejected: %s", err, extra=self._fields(env))
                await self._dead_letter(msg, str(err))
            except asyncio.CancelledError:
                await _quietly(msg.nak())  # cancelled past the grace period: redeliver now
                raise
            except Exception as err:
                if span is not None:
                    span.record_exception(err)
                    span.set_status(trace.StatusCode.ERROR, str(err))
                if delivered == 1:  # the traceback once; the retries say how many
                    log.exception("handler failed; retrying", extra=self._fields(env))
                else:
                    log.info(
                        "handler failed on delivery %d: %r", delivered, err, extra=self._fields(env)
                    )
                if last:
                    reason = f"handler failed {delivered} times: {err!r}"
                    log.error("dead-lettering: %s", reason, extra=self._fields(env))
                    await self._dead_letter(msg, reason)
                else:
                    await _quietly(msg.nak(delay=self._backoff_s(delivered)))
            else:
                # Not confirmed (a round trip per message): a lost ack means a redelivery, and
                # handlers are idempotent. Nor written alone: it leaves with the connection's
                # next write, the handler's effects being stored already (`ack_soon`; a
                # process killed meanwhile has its messages redelivered). The loop flushes
                # before it returns.
                try:
                    if not ack_soon(
                        self._nc, msg, within_s=self._settings.ack_linger_s, at_most=self._ack_batch
                    ):
                        await msg.ack()
                except nats.errors.Error as exc:
                    _unanswered(exc)

    def _fields(self, env: Envelope) -> dict[str, str | int]:
        """What a log record about `env` says (made only for one: records are rare)."""
        return {
            "workload": env.workload,
            "event": env.type,
            "sequence": env.sequence,
            "consumer": self._durable,
        }

    def _backoff_s(self, deliveries: int) -> float:
        exponent = min(max(deliveries - 1, 0), 30)
        return min(self._settings.max_backoff_s, self._settings.backoff_s * 2.0**exponent)

    async def _dead_letter(self, msg: Msg, reason: str) -> None:
        """Copy `msg` to the DLQ, then terminate it; if the copy fails, nak it: never drop it."""
        try:
            await self._publisher.dead_letter(msg, consumer=self._durable, reason=reason)
        except Retry as err:
            log.error("cannot dead-letter, will retry: %s", err, extra={"consumer": self._durable})
            await _quietly(msg.nak(delay=err.delay_s))
            return
        await _quietly(msg.term())


async def _quietly(reply: Awaitable[None]) -> None:
    """Send an ack-type reply; if the connection fails, the server redelivers: log and go on."""
    try:
        await reply
    except nats.errors.Error as exc:
        _unanswered(exc)


def _unanswered(exc: nats.errors.Error) -> None:
    log.warning("could not answer the server for a message: %r", exc)
