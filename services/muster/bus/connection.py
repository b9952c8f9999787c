"""`BusConfig`, `connect` and `Bus`: one NATS connection with everything a service does on it.

`Bus` is the facade services use: publish (publisher.py), consume (consumer.py; in stream
order: ordered.py), replay (replay.py), key-value buckets (kv.py), object buckets (objects.py)
and stream facts, each raising the bus's errors (errors.py), never nats-py's. It holds no
state besides the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import NamedTuple, TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from muster.bus.client import MusterClient, outage_callbacks
from muster.bus.consumer import ConsumerSettings, Handler, consume, consumer_config
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES, decode_stored
from muster.bus.errors import BusError, NotFound, Reject, Retry, Unavailable, wrapped
from muster.bus.kv import Bucket, open_bucket
from muster.bus.objects import ObjectBucket
from muster.bus.progress import Progress
from muster.bus.publisher import Fence, Publisher
from muster.bus.pulse import Pulses
from muster.bus.redact import redact_url
from muster.bus.replay import last_sequence, replay
from muster.bus.setup import ensure_stream
from muster.bus.subjects import EVENTS_STREAM, stream_configs
from muster.contracts.v1.events_pb2 import Envelope
from muster.metrics.bus import DEAD_LETTER, ERROR, RETRY, BusMetrics, instrument

log = logging.getLogger(__name__)
T = TypeVar("T")
LAG_EVERY_S = 5.0  # how often a consumer's lag is read from NATS, with metrics on
# How long setting up (streams, buckets) waits for a NATS that does not answer: a restart of
# nats-server takes seconds on a loaded machine, and a service starting meanwhile exited.
OUTAGE_PATIENCE_S = 30.0
# What NATS not answering looks like (a request lost with the connection, none served yet).
_NO_ANSWER = (
    TimeoutError,  # nats.errors.TimeoutError too
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
)


class Stored(NamedTuple):
    """A message read back from a stream: its sequence, and its envelope (None: poison)."""

    sequence: int
    envelope: Envelope | None


class BusConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach NATS, and the bus's limits. Validated once in a service's `__main__`."""

    url: str = "nats://127.0.0.1:4222"  # several: comma-separated
    creds_file: str | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None  # a client certificate (nats-server's verify_and_map
    tls_key_file: str | None = None  # finds the service's user from its subject)
    name: str = "muster"  # the connection's name, as the server's monitoring shows it
    # Replies to this connection's requests arrive under this prefix; with per-service users
    # (muster.bus.permissions) it is `_INBOX.<user>`, the only subjects the user may read.
    inbox_prefix: str = "_INBOX"
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    connect_timeout_s: float = 10.0  # connect() keeps trying this long before giving up
    publish_timeout_s: float = 5.0  # wait for a PubAck (or an ack's confirmation) this long
    stream_replicas: int = 1  # servers holding each stream and bucket it creates (NATS cluster: 3)

    def __post_init__(self) -> None:
        if self.max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be >= 1, got {self.max_event_bytes}")
        if not 1 <= self.stream_replicas <= 5:  # JetStream's own limit
            raise ValueError(f"stream replicas must be in 1..5, got {self.stream_replicas}")
        if self.connect_timeout_s <= 0 or self.publish_timeout_s <= 0:
            raise ValueError("connect_timeout_s and publish_timeout_s must be > 0")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("a NATS client certificate needs both its cert and its key file")

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context to reach NATS with: the CA to trust, the client certificate."""
        if not (self.tls_ca_file or self.tls_cert_file):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca_file)
        if self.tls_cert_file:
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return context

    def __repr__(self) -> str:
        # Never the password or token: a config may end up in a log line or a traceback.
        hidden = {"password", "token"}
        fields = ", ".join(
            f"{f}={'***' if f in hidden and getattr(self, f) else repr(getattr(self, f))}"
            for f in self.__struct_fields__
        )
        return f"BusConfig({fields.replace(repr(self.url), repr(redact_url(self.url)))})"


async def connect(config: BusConfig, *, metrics: BusMetrics | None = None) -> Bus:
    """A Bus connected to `config.url`, reconnecting forever once connected.

    Keeps trying the first connection for `config.connect_timeout_s` (NATS may start after us,
    as under `muster run`), then raises ConnectionError naming the last error. With `metrics`
    (the service serves /metrics), the bus keeps the generic series (`muster.metrics.bus`).
    """
    nc = MusterClient()
    denied: list[Exception] = []
    told = outage_callbacks(
        nc,
        log,
        on_down=metrics.disconnected if metrics is not None else None,
        on_up=metrics.reconnected if metrics is not None else None,
        on_denied=denied.append,
    )
    attempt = nc.connect(
        servers=[u.strip() for u in config.url.split(",") if u.strip()],
        name=config.name,
        allow_reconnect=True,
        max_reconnect_attempts=-1,  # a service waits for NATS to come back, however long
        reconnect_time_wait=1,
        connect_timeout=max(1, round(min(config.connect_timeout_s, 5.0))),
        error_cb=told.error_cb,
        disconnected_cb=told.disconnected_cb,
        reconnected_cb=told.reconnected_cb,
        user_credentials=config.creds_file,
        user=config.user,
        password=config.password,
        token=config.token,
        tls=config.tls_context(),
        inbox_prefix=config.inbox_prefix,
    )
    try:
        # nats-py retries a first connection forever when reconnecting is allowed: bound it.
        await asyncio.wait_for(attempt, config.connect_timeout_s)
    except TimeoutError:
        last = nc.last_error
        await nc.close()
        # The URL may carry a user and password (nats://user:secret@host): never print them.
        raise ConnectionError(
            f"NATS at {redact_url(config.url)} not reachable within "
            f"{config.connect_timeout_s:g}s" + (f": {last!r}" if last else "")
        ) from last
    bus = Bus(nc, config, metrics=metrics)
    bus.denied = denied
    return bus


class StreamState(NamedTuple):
    """Where a stream stands."""

    first: int  # its oldest sequence still stored
    last: int  # its newest (0: none yet)
    created: str  # when it was made (ISO 8601): sequences start over in a stream made again


def _type_of(env: Envelope) -> str:
    return env.type


def _outcome_of(exc: BaseException) -> str:
    """What the consume loop does with a message whose handler raised `exc`."""
    if isinstance(exc, Retry):
        return RETRY
    return DEAD_LETTER if isinstance(exc, Reject) else ERROR


class Bus:
    """A NATS connection with muster's streams, publisher, consumers, replays and buckets."""

    def __init__(
        self, nc: NatsClient, config: BusConfig, *, metrics: BusMetrics | None = None
    ) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=config.publish_timeout_s)
        self.config = config
        # The service's series (None: it serves no /metrics, and nothing is counted).
        self.metrics = metrics
        self.publisher = Publisher(
            nc, self.js, max_event_bytes=config.max_event_bytes, timeout_s=config.publish_timeout_s
        )
        self.publisher.metrics = metrics
        # Each permissions violation NATS reported on this connection (`connect` fills it): a
        # request it refused goes unanswered, like one lost to a restart, but never succeeds.
        self.denied: list[Exception] = []
        # What each consume loop has in hand and finished, for the watchdog (bus/watchdog.py).
        self.progress = Progress()
        self.pulses = Pulses()  # when each timer loop means to tick next (bus/pulse.py)

    async def ensure_streams(self) -> None:
        """Create muster's streams, or bring their config up to date; safe to call any time.

        Writes nothing when they are as this version wants them, so a service whose NATS user
        may only read them (`muster nats-setup` made them) starts as well.
        """
        for config in stream_configs(replicas=self.config.stream_replicas):
            await outlasting(
                f"stream {config.name}",
                functools.partial(ensure_stream, self.js, config),
                denied=self.denied,
            )

    async def close(self, *, drain_s: float | None = None) -> None:
        """Flush what was published and close the connection (drains subscriptions first).

        With `drain_s`, the drain gets that long; with NATS unreachable there is nothing to
        drain into, and the connection is closed at once (nats-py's drain would wait for a
        reconnection, then its own 30 s timeout)."""
        if self.nc.is_closed:
            return
        if not self.nc.is_connected:
            await self.abandon()
            return
        try:
            await asyncio.wait_for(self.nc.drain(), drain_s)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("NATS drain failed: %r", exc)
            await self.nc.close()

    async def abandon(self) -> None:
        """Close without draining, NATS being unreachable: what waits for an answer fails now
        (`MusterClient.abandon`), so that whatever still runs on the bus ends promptly."""
        if self.nc.is_closed:
            return
        log.info("NATS unreachable: closing without draining")
        if isinstance(self.nc, MusterClient):
            await self.nc.abandon()
        else:
            await self.nc.close()

    async def publish(
        self,
        env: Envelope,
        *,
        expected_last_subject_sequence: int | None = None,
        fenced_on: str | None = None,
        dedupe_id: str | None = None,
        named: bool = False,
    ) -> int:
        """Store `env`; its stream sequence once JetStream acked it (see `Publisher.publish`)."""
        return await self.publisher.publish(
            env,
            expected_last_subject_sequence=expected_last_subject_sequence,
            fenced_on=fenced_on,
            dedupe_id=dedupe_id,
            named=named,
        )

    async def dead_letter_unstored(self, env: Envelope, *, consumer: str, reason: str) -> int:
        """See `Publisher.dead_letter_unstored`."""
        return await self.publisher.dead_letter_unstored(env, consumer=consumer, reason=reason)

    async def publish_all(self, envs: Iterable[Envelope]) -> list[int]:
        """Store `envs` in order, each acked before the next is sent; their sequences."""
        return await self.publisher.publish_all(envs)

    async def publish_together(
        self, envs: Sequence[Envelope], fences: Sequence[Fence | None]
    ) -> list[int | BusError]:
        """Store `envs` side by side, each fenced where given (`Publisher.publish_together`)."""
        return await self.publisher.publish_together(envs, fences)

    async def publish_many(self, envs: Sequence[Envelope]) -> list[int | BusError]:
        """Store `envs` many at a time, each workload's in order (`Publisher.publish_many`)."""
        return await self.publisher.publish_many(envs)

    async def consume(
        self,
        durable: str,
        subjects: Sequence[str],
        handler: Handler,
        *,
        stream: str = EVENTS_STREAM,
        lanes: int = 8,
        max_ack_pending: int = 256,
        max_deliver: int = 20,
        ack_wait_s: float = 30.0,
        batch: int = 64,
        deliver_new: bool = False,
    ) -> None:
        """Handle the messages of durable consumer `durable` until cancelled (consumer.py)."""
        settings = ConsumerSettings(
            stream=stream,
            lanes=lanes,
            max_ack_pending=max_ack_pending,
            max_deliver=max_deliver,
            ack_wait_s=ack_wait_s,
            batch=batch,
            deliver_new=deliver_new,
            max_event_bytes=self.config.max_event_bytes,
        )
        await self.consume_with(durable, subjects, handler, settings)

    async def consume_with(
        self,
        durable: str,
        subjects: Sequence[str],
        handler: Handler,
        settings: ConsumerSettings,
    ) -> None:
        """`consume` with every setting spelled out in a `ConsumerSettings`."""
        if self.metrics is not None:
            handler = instrument(
                self.metrics, durable, handler, type_of=_type_of, outcome_of=_outcome_of
            )
        tracker = self.progress.track(
            durable,
            stream=settings.stream,
            consumer=durable,
            max_ack_pending=settings.max_ack_pending,
        )
        try:
            async with self.following_lag(settings.stream, durable):
                await consume(
                    self.nc, self.js, self.publisher, durable, subjects, handler, settings,
                    tracker=tracker,
                )  # fmt: skip
        finally:
            self.progress.forget(tracker)

    @contextlib.asynccontextmanager
    async def following_lag(
        self, stream: str, durable: str, *, every_s: float = LAG_EVERY_S, label: str = ""
    ) -> AsyncIterator[None]:
        """While the body runs, read durable `durable`'s lag every `every_s` into the metrics,
        as `label`'s if given (with none, nothing is read)."""
        if self.metrics is None:
            yield
            return
        lag = self._follow_lag(stream, durable, every_s, label or durable)
        task = asyncio.create_task(lag, name="lag")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow_lag(self, stream: str, durable: str, every_s: float, label: str) -> None:
        assert self.metrics is not None
        while True:
            try:
                info = await self.js.consumer_info(stream, durable)
            except (nats.errors.Error, TimeoutError) as exc:
                log.debug("lag of %s not read: %r", durable, exc)
            else:
                self.metrics.lag(
                    label, pending=int(info.num_pending or 0), ack_pending=info.num_ack_pending
                )
            await asyncio.sleep(every_s)

    def replay(
        self,
        subjects: Sequence[str],
        *,
        stream: str = EVENTS_STREAM,
        from_sequence: int = 1,
        until_sequence: int | None = None,
        follow: bool = False,
        watched: str | None = None,
    ) -> AsyncIterator[Envelope]:
        """The envelopes on `subjects` from `from_sequence`, in order (replay.py). `watched`:
        the name the progress watchdog judges this reading by (a service's main follow loop;
        never a client's, whose slowness is not the service's stall)."""
        tracker = None
        if watched is not None:
            tracker = self.progress.track(watched, stream=stream, consumer="", max_ack_pending=1)
        return replay(
            self.nc,
            self.js,
            subjects,
            stream=stream,
            from_sequence=from_sequence,
            until_sequence=until_sequence,
            follow=follow,
            max_event_bytes=self.config.max_event_bytes,
            tracker=tracker,
        )

    async def last_sequence(self, stream: str = EVENTS_STREAM) -> int:
        """The last sequence stored in `stream` (0 if none)."""
        return await last_sequence(self.js, stream)

    async def last_stored(self, subject_filter: str, stream: str = EVENTS_STREAM) -> Stored | None:
        """The last message `stream` holds on `subject_filter` (wildcards allowed), one read;
        None when there is none. Its envelope is None when it does not decode (poison, which
        readers skip). `Unavailable` when NATS fails."""
        with wrapped(f"stream {stream} last message on {subject_filter}"):
            try:
                msg = await self.js.get_last_msg(stream, subject_filter)
            except nats.js.errors.NotFoundError:
                return None
        try:
            env = decode_stored(
                msg.data or b"", subject=msg.subject or "", max_bytes=self.config.max_event_bytes
            )
        except Reject:
            return Stored(msg.seq or 0, None)
        env.sequence = msg.seq or 0
        return Stored(env.sequence, env)

    async def stored_subjects(self, pattern: str, stream: str = EVENTS_STREAM) -> list[str]:
        """The subjects matching `pattern` that `stream` holds a message of, sorted: the
        stream's own subject list, one request, exact at one instant; `Unavailable` when NATS
        fails."""
        with wrapped(f"stream {stream} subjects {pattern}"):
            info = await self.js.stream_info(stream, subjects_filter=pattern)
        return sorted((info.state.subjects or {}) if info.state else {})

    async def add_consumer(
        self, durable: str, subjects: Sequence[str], settings: ConsumerSettings
    ) -> None:
        """Make durable consumer `durable` over `subjects` now (or keep it as it is), so that
        it holds what is stored from here on before `consume` runs; `Unavailable` when NATS
        fails."""
        with wrapped(f"consumer {durable}"):
            await self.js.add_consumer(
                settings.stream, config=consumer_config(durable, subjects, settings)
            )

    async def stream_state(self, stream: str = EVENTS_STREAM) -> StreamState:
        """`stream`'s first and last sequences and when it was made; `Unavailable` when NATS
        fails."""
        with wrapped(f"stream {stream}"):
            info = await self.js.stream_info(stream)
        created = info.created.isoformat() if info.created else ""
        return StreamState(int(info.state.first_seq), int(info.state.last_seq), created)

    async def drained(self, durable: str, *, stream: str = EVENTS_STREAM) -> bool:
        """Whether durable `durable` has nothing left to deliver nor awaiting its ack."""
        with wrapped(f"consumer {durable}"):
            info = await self.js.consumer_info(stream, durable)
        return not info.num_pending and not info.num_ack_pending

    async def acked_through(self, durable: str, *, stream: str = EVENTS_STREAM) -> int:
        """The stream sequence up to which durable `durable` acknowledged every message of
        its filter (its ack floor): each of those is handled. 0 when it does not exist (it has
        handled nothing); `Unavailable` when NATS fails or refuses."""
        try:
            with wrapped(f"consumer {durable}"):
                info = await self.js.consumer_info(stream, durable)
        except NotFound:
            return 0
        floor = info.ack_floor
        return int(floor.stream_seq or 0) if floor is not None else 0

    def objects(self, bucket: str, *, description: str = "", chunk_bytes: int) -> ObjectBucket:
        """The object-store bucket `bucket`, created on `stream_replicas` servers when first
        written."""
        return ObjectBucket(
            self.js,
            bucket,
            description=description,
            replicas=self.config.stream_replicas,
            chunk_bytes=chunk_bytes,
        )

    async def kv(self, bucket: str, *, ttl_s: float | None = None, history: int = 1) -> Bucket:
        """The key-value bucket `bucket`, created if missing (on `stream_replicas` servers);
        waits for a NATS that does not answer (`outlasting`)."""
        opening = functools.partial(
            open_bucket,
            self.js,
            bucket,
            ttl_s=ttl_s,
            history=history,
            replicas=self.config.stream_replicas,
            writer=self.publisher,
            progress=self.progress,
        )
        return await outlasting(f"key-value bucket {bucket}", opening, denied=self.denied)


async def outlasting(
    what: str,
    op: Callable[[], Awaitable[T]],
    *,
    patience_s: float = OUTAGE_PATIENCE_S,
    denied: Sequence[Exception] = (),
) -> T:
    """`op()`, tried again while NATS does not answer (a nats-server restarting, JetStream not
    serving yet), for `patience_s` at most, then its error: a service that sets up while the
    server restarts waits for it, as its connection does. An answer that is an error (a
    refused change), a creation NATS does not answer (no right to: SetupError), or no answer
    after NATS reported a permissions violation (`Bus.denied` grew) is raised at once."""
    deadline = time.monotonic() + patience_s
    delay_s, told = 0.1, False
    refusals = len(denied)
    while True:
        try:
            return await op()
        except (Unavailable, nats.errors.Error, TimeoutError) as exc:
            if (
                not _no_answer(exc)
                or len(denied) > refusals
                or time.monotonic() + delay_s >= deadline
            ):
                raise
            if not told:
                log.warning("%s: NATS does not answer (%r); trying again", what, exc)
                told = True
        await asyncio.sleep(delay_s)
        delay_s = min(2 * delay_s, 1.0)


def nats_outage(exc: BaseException) -> bool:
    """Whether `exc` says NATS was away (not answering, a connection lost or reconnecting), and
    nothing else: the bus's `Retry` (temporary by definition) or `Unavailable` raised from
    NATS not answering, or a group (a TaskGroup's) of such. Anything besides (a refusal, a
    lease lost, a bug) is not, even when NATS not answering caused it."""
    if isinstance(exc, BaseExceptionGroup):
        errors = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        return bool(errors) and all(nats_outage(e) for e in errors)
    if isinstance(exc, Retry):
        return True
    while isinstance(exc, Unavailable) and exc.__cause__ is not None:
        exc = exc.__cause__
    return isinstance(exc, _NO_ANSWER)


def _no_answer(exc: BaseException | None) -> bool:
    """Whether `exc`, or what it was raised from, is NATS not answering."""
    while exc is not None:
        if isinstance(exc, _NO_ANSWER):
            return True
        exc = exc.__cause__
    return False
