"""The series every service has, kept by the bus middleware (`muster.bus`), not by services.

- `muster_events_consumed_total{service,consumer,type,outcome}`: events handled, by what the
  consumer did with them: `ack`, `retry` (nak, redelivered later), `dead_letter`, `error` (a
  handler bug: nak with back-off);
- `muster_event_handle_seconds{service,consumer,type}`: how long handling took (a batch
  handled at once, as admission does: one observation per batch, type `batch`);
- `muster_events_published_total{service,type}`: events stored (PubAck received);
- `muster_dead_letters_total{service,consumer}`: copies put in `MUSTER_DLQ`;
- `muster_consumer_pending_messages{service,consumer}`, `..._ack_pending_messages`: the
  durable consumer's lag as the server counts it (not yet delivered; delivered, not acked);
- `muster_consumer_stalled{service,consumer}`: 1 while the consumer is stalled (work waits and
  nothing moved for `--stall-seconds`: liveness is NOT_SERVING), else 0;
  `muster_consumer_stuck_seconds{service,consumer}`: how long work has waited with nothing
  moving (0 while it moves or nothing waits), as the watchdog last looked (bus/watchdog.py);
- `muster_nats_reconnects_total{service}`, `muster_nats_disconnects_total{service}`.

Label children are looked up once and cached: `labels()` costs microseconds, paid per event.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Handling times: a fraction of a millisecond (most events) to seconds (a bind under load).
HANDLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

ACK, RETRY, DEAD_LETTER, ERROR = "ack", "retry", "dead_letter", "error"
BATCH = "batch"  # the `type` of a batch's one handling-time observation

E = TypeVar("E")


class BusMetrics:
    """The generic series of service `service`, in `registry` (one registry per service)."""

    def __init__(self, registry: CollectorRegistry, *, service: str) -> None:
        self.registry = registry
        self.service = service
        self._consumed = Counter(
            "muster_events_consumed_total",
            "Events a consumer handled, by type and outcome (ack, retry, dead_letter, error).",
            ["service", "consumer", "type", "outcome"],
            registry=registry,
        )
        self._handle_s = Histogram(
            "muster_event_handle_seconds",
            "Time a consumer's handler took per event (type batch: per batch handled at once).",
            ["service", "consumer", "type"],
            buckets=HANDLE_BUCKETS,
            registry=registry,
        )
        self._published = Counter(
            "muster_events_published_total",
            "Events this service stored in JetStream (acknowledged), by type.",
            ["service", "type"],
            registry=registry,
        )
        self._dead = Counter(
            "muster_dead_letters_total",
            "Messages a consumer copied to MUSTER_DLQ and terminated.",
            ["service", "consumer"],
            registry=registry,
        )
        self._pending = Gauge(
            "muster_consumer_pending_messages",
            "Messages of a durable consumer not yet delivered (its lag), as NATS counts them.",
            ["service", "consumer"],
            registry=registry,
        )
        self._ack_pending = Gauge(
            "muster_consumer_ack_pending_messages",
            "Messages of a durable consumer delivered and not yet acknowledged.",
            ["service", "consumer"],
            registry=registry,
        )
        self._stalled = Gauge(
            "muster_consumer_stalled",
            "1 while a consumer is stalled: work waits and nothing moved for --stall-seconds.",
            ["service", "consumer"],
            registry=registry,
        )
        self._stuck_s = Gauge(
            "muster_consumer_stuck_seconds",
            "Seconds a consumer's work has waited with nothing moving (0: moving or idle).",
            ["service", "consumer"],
            registry=registry,
        )
        self._reconnects = Counter(
            "muster_nats_reconnects_total",
            "Times the NATS connection came back after a disconnection.",
            ["service"],
            registry=registry,
        ).labels(service)
        self._disconnects = Counter(
            "muster_nats_disconnects_total",
            "Times the NATS connection was lost (not counting a close on purpose).",
            ["service"],
            registry=registry,
        ).labels(service)
        self._consumed_of: dict[tuple[str, str, str], Counter] = {}
        self._handle_of: dict[tuple[str, str], Histogram] = {}
        self._published_of: dict[str, Counter] = {}

    def consumed(self, consumer: str, event_type: str, outcome: str, seconds: float) -> None:
        """One event handled by `consumer` with `outcome`, in `seconds`."""
        self._count(consumer, event_type, outcome)
        self._time(consumer, event_type, seconds)

    def consumed_batch(
        self,
        consumer: str,
        types: Sequence[str],
        outcomes: Sequence[str],
        seconds: float,
    ) -> None:
        """A batch handled at once (admission): each event counted, the batch timed once."""
        for event_type, outcome in zip(types, outcomes, strict=True):
            self._count(consumer, event_type, outcome)
        self._time(consumer, BATCH, seconds)

    def _count(self, consumer: str, event_type: str, outcome: str) -> None:
        key = (consumer, event_type, outcome)
        counter = self._consumed_of.get(key)
        if counter is None:
            counter = self._consumed_of[key] = self._consumed.labels(self.service, *key)
        counter.inc()

    def _time(self, consumer: str, event_type: str, seconds: float) -> None:
        key = (consumer, event_type)
        timing = self._handle_of.get(key)
        if timing is None:
            timing = self._handle_of[key] = self._handle_s.labels(self.service, *key)
        timing.observe(seconds)

    def published(self, event_type: str) -> None:
        counter = self._published_of.get(event_type)
        if counter is None:
            counter = self._published_of[event_type] = self._published.labels(
                self.service, event_type
            )
        counter.inc()

    def dead_lettered(self, consumer: str) -> None:
        self._dead.labels(self.service, consumer).inc()

    def lag(self, consumer: str, *, pending: int, ack_pending: int) -> None:
        self._pending.labels(self.service, consumer).set(pending)
        self._ack_pending.labels(self.service, consumer).set(ack_pending)

    def progress(self, consumer: str, *, stuck_s: float, stalled: bool) -> None:
        self._stuck_s.labels(self.service, consumer).set(stuck_s)
        self._stalled.labels(self.service, consumer).set(int(stalled))

    def reconnected(self) -> None:
        self._reconnects.inc()

    def disconnected(self) -> None:
        self._disconnects.inc()


def instrument(
    metrics: BusMetrics,
    consumer: str,
    handler: Callable[[E], Awaitable[None]],
    *,
    type_of: Callable[[E], str],
    outcome_of: Callable[[BaseException], str],
) -> Callable[[E], Awaitable[None]]:
    """`handler`, counting and timing each call in `metrics` (outcome from what it raised)."""

    async def counted(event: E) -> None:
        started = time.perf_counter()
        try:
            await handler(event)
        except Exception as exc:
            metrics.consumed(consumer, type_of(event), outcome_of(exc), _since(started))
            raise
        metrics.consumed(consumer, type_of(event), ACK, _since(started))

    return counted


def _since(started: float) -> float:
    return time.perf_counter() - started
