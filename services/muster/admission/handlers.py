"""Rounds: consumed events into the engine, in stream order, one `schedule()` per batch.

`Rounds.apply_batch(envelopes)` is what the consumer (`consumer.py`) calls with the events it
fetched together, in stream order. Each event is read as a fact (`translate.fact_of`) and
applied; then the engine decides once, and every decision is published, each after the
previous one's PubAck. Only then does the consumer ack the batch.

Every event type takes that path (one round per fetched batch rather than one handler per
event type, so that a batch is decided once and in stream order). What each fact does is in
`AdmissionState._record`:

    submitted            engine.submit when this shard owns the queue's cohort tree; indexed
    finished, deleted    engine.finish / engine.delete: quota released
    eviction_completed   engine.stopped: the evicted workload releases quota and is requeued
    pods_ready           engine.pods_ready (waitForPodsReady)
    admission_check      Ready admits, Retry evicts, Rejected deactivates
    gang_rejected        GangTimedOut: evicted (reason GangRejected), quota held until
                         eviction_completed; BindFailed: nothing (gangpermit retries the gang)
    placement_preempted  the Kueue victims this shard owns are evicted (reason Preempted)
    config_applied/deleted   the engine's configuration; moved workloads adopted or dropped
    pending, quota_reserved, admitted, evicted, requeued, routed
                         another replica's decisions: indexed as history, never re-decided

A decision that fails to publish is retried with the same event id (JetStream drops copies),
so a decision the engine made is never lost while the process lives; if it dies, the next
owner rebuilds from the stream, which holds exactly what was published.

`Rounds.run_timers` runs rounds with no event when the engine's next timer is due (requeue
back-off, waitForPodsReady timeouts).

With snapshots on, every event applied (its own decisions' echoes included) then goes to the
`CompactLog` (snapshot.py), with its bytes as the consumer fetched them.

Tracing: each decision is published in its workload's trace (the trace of the first event
about it that this replica consumed; a batch mixes many workloads' traces). With spans
recorded, a round is the span `admission.round` (linked to the traces of its facts) and each
decision a span `admission.<decision>` in its workload's trace, from the round's start until
JetStream has it. With metrics on (`AdmissionMetrics`), each round is reported before its
decisions are published (a finished workload is still in the engine then).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from opentelemetry import trace

from muster.admission.snapshot import CompactLog
from muster.admission.state import AdmissionState
from muster.admission.translate import (
    RECORDED,
    Delete,
    Fact,
    FactError,
    Finish,
    Recorded,
    envelopes_of,
    fact_of,
)
from muster.bus import Reject, Retry
from muster.bus.cancel import finishing, raise_if_cancelling
from muster.bus.tracing import headers_of_envelope, recording, start_span, trace_decisions
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class Publisher(Protocol):
    """What rounds publish through: `Bus.publish` returns once JetStream has the event."""

    async def publish(self, env: pb.Envelope) -> int: ...


class RoundObserver(Protocol):
    """What rounds report to when metrics are on (`admission.metrics.AdmissionMetrics`)."""

    def round(
        self, facts: Sequence[Fact], events: Sequence[Event], *, decide_s: float | None
    ) -> None: ...

    def published(self, seconds: float) -> None: ...


MAX_LINKS = 128  # traces a round's span links to, at most (a batch holds up to 256 facts)


class Rounds:
    """Applies consumed facts in rounds, publishes decisions, and fires the engine's timers."""

    def __init__(
        self,
        state: AdmissionState,
        publisher: Publisher,
        *,
        clock: Clock,
        on_round: Callable[[], None] = lambda: None,
        retry_s: float = 0.5,
        history: CompactLog | None = None,
        metrics: RoundObserver | None = None,
    ) -> None:
        self.state = state
        self.metrics = metrics
        # Workload → the trace (W3C headers) its decisions are published in.
        self.traces: dict[str, dict[str, str]] = {}
        self.history = history  # with snapshots on: what the state depends on (snapshot.py)
        self.publisher = publisher
        self.clock = clock
        self.on_round = on_round
        self.retry_s = retry_s
        self.lock = asyncio.Lock()  # one round at a time; readers of the engine take it too
        self.rounds = 0
        self._timers_changed = asyncio.Event()

    # --- consumed events -------------------------------------------------------------------

    async def apply_batch(
        self, envs: Sequence[pb.Envelope], raw: Sequence[bytes] | None = None
    ) -> list[Reject | None]:
        """Apply `envs` (in stream order) in one round; per event, None or why it is rejected.

        Returns once every decision of the round is stored. Events at or below the last
        applied sequence (replayed by the rebuild, or redelivered) are skipped. `raw` holds the
        envelopes as stored, for the snapshot log (without it, what it keeps is encoded again).
        """
        outcomes: list[Reject | None] = []
        facts: list[tuple[pb.Envelope, Fact]] = []
        # Every event is our own decision coming back, or already applied. (No event at all
        # asks for a round: the cluster registry does, when a worker cluster changes.)
        echoes_only = bool(envs)
        for env in envs:
            outcomes.append(None)
            if env.sequence and env.sequence <= self.state.last_sequence:
                continue
            if env.source == self.state.source and env.WhichOneof("payload") in RECORDED:
                continue  # our own decision, recorded when published: not even decoded
            echoes_only = False
            try:
                fact = fact_of(env)
            except FactError as exc:
                outcomes[-1] = Reject(str(exc))
                continue
            if fact is not None:
                fact = self.state.counted(fact, cluster=env.cluster)
            if fact is None or (isinstance(fact, Recorded) and fact.source == self.state.source):
                continue  # nothing for admission, or our own decision (recorded when published)
            if env.traceparent and env.workload not in self.traces:
                self.traces[env.workload] = headers_of_envelope(env.traceparent, env.tracestate)
            facts.append((env, fact))
        # The decisions' cause: the last event applied (their ids derive from it). A batch of
        # echoes changed nothing a round could act on: most batches, under load, are those.
        rejected = (
            {} if echoes_only else await self._round(facts, cause=facts[-1][0] if facts else None)
        )
        for env, fact in facts:
            if isinstance(fact, Finish | Delete):
                self.traces.pop(env.workload, None)  # its last decisions are published
        # No await from here on: a snapshot, taken between rounds, sees the log and the last
        # sequence agree. The log reads the ledger as the whole round left it.
        history = self.history
        for i, env in enumerate(envs):
            if env.event_id in rejected:
                outcomes[i] = rejected[env.event_id]
            if env.sequence > self.state.last_sequence:
                self.state.last_sequence = env.sequence
                if history is not None and outcomes[i] is None:
                    history.add(env, None if raw is None else raw[i])
        return outcomes

    async def _round(
        self, facts: Sequence[tuple[pb.Envelope, Fact]], *, cause: pb.Envelope | None
    ) -> dict[str, Reject]:
        rejected: dict[str, Reject] = {}
        async with self.lock:
            started_ns = time.time_ns()
            started = time.perf_counter()
            now_s = self.clock()
            version = self.state.engine.version
            events: list[Event] = []
            for env, fact in facts:
                try:
                    events += self.state.apply(fact, now_s=now_s)
                except Exception as exc:  # a bug: dead-letter this event, keep the others
                    log.exception("applying %s failed", env.type, extra={"workload": env.workload})
                    rejected[env.event_id] = Reject(f"admission could not apply it: {exc!r}")
            # The engine counts every call that returns events as a change, decide's included:
            # what tells is whether applying the facts changed it, or the round decided anything.
            changed = self.state.engine.version != version
            if facts and not changed and self.state.settled():
                # Only other shards' workloads (ledger history): the last round's decisions
                # stand. With several shards, most of a replica's batches are these.
                return rejected
            events += self.state.decide(now_s=now_s)
            changed = changed or bool(events)
            if self.metrics is not None:
                decide_s = time.perf_counter() - started
                self.metrics.round([f for _, f in facts], events, decide_s=decide_s)
            span = self._round_span(facts, started_ns=started_ns)
            try:
                await self.publish(
                    events, cause=cause or self._tick_cause(now_s), started_ns=started_ns
                )
            finally:
                if span is not None:
                    span.set_attribute("muster.decisions", len(events))
                    span.end()
            self.rounds += 1
        self._timers_changed.set()
        if changed:  # the views are the engine's: a round about other shards' workloads,
            self.on_round()  # or one that decided nothing, leaves them as they were
        return rejected

    def _round_span(
        self, facts: Sequence[tuple[pb.Envelope, Fact]], *, started_ns: int
    ) -> trace.Span | None:
        """The round's span, linked to its facts' traces; None unless spans are recorded."""
        if not recording():
            return None
        links = [self.traces[e.workload] for e, _ in facts[:MAX_LINKS] if e.workload in self.traces]
        attributes = {"muster.shard": self.state.sharding.shard, "muster.facts": len(facts)}
        return start_span(
            "admission.round", None, start_ns=started_ns, links=links, attributes=attributes
        )

    # --- timers ----------------------------------------------------------------------------

    async def run_timers(self) -> None:
        """Run a round whenever the engine's next timer is due, until cancelled."""
        while True:
            raise_if_cancelling()
            wakeup = self.state.next_wakeup_s()
            timeout = None if wakeup is None else max(0.0, wakeup - self.clock())
            self._timers_changed.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._timers_changed.wait()  # a round ran: the next timer may move
                continue
            except TimeoutError:
                pass
            await finishing(self._round((), cause=None))  # its events are being published

    async def catch_up(self, events: Sequence[Event], *, replay_end: int) -> None:
        """Publish what taking ownership decided, with ids fixed by the rebuild's end."""
        cause = pb.Envelope(event_id=f"rebuild/{self.state.source}/{replay_end}")
        async with self.lock:
            if self.metrics is not None:
                self.metrics.round((), events, decide_s=None)
            await self.publish(events, cause=cause)
        self._timers_changed.set()
        self.on_round()

    def _tick_cause(self, now_s: float) -> pb.Envelope:
        return pb.Envelope(event_id=f"timer/{self.state.source}/{round(now_s * 1000)}")

    # --- publishing ------------------------------------------------------------------------

    async def publish(
        self, events: Sequence[Event], *, cause: pb.Envelope, started_ns: int | None = None
    ) -> None:
        """Publish the decisions in `events`: one workload's in order, workloads side by side.

        Each wave holds at most one decision per workload and starts once the previous wave is
        stored, so a workload's decisions are stored in the order made (quota_reserved before
        admitted) while a round of many workloads costs a few round trips, not one per event.
        A temporary failure is retried with the same envelope (same id) until it is stored.
        Each goes in its workload's trace (`started_ns`: when its span starts, if recorded).
        """
        state = self.state
        envs = envelopes_of(state.decisions(events), cause=cause, source=state.source)
        spans = trace_decisions(
            envs, service="admission", trace_of=self._trace_of, start_ns=started_ns
        )
        started = time.perf_counter()
        try:
            for wave in waves_by_workload(envs):
                await asyncio.gather(*(self._publish_until_stored(env) for env in wave))
        finally:
            for span in spans:
                span.end()
        if self.metrics is not None and envs:
            self.metrics.published(time.perf_counter() - started)
        published = [fact for env in envs if isinstance(fact := fact_of(env), Recorded)]
        state.record_published(published)

    def _trace_of(self, env: pb.Envelope) -> dict[str, str] | None:
        return self.traces.get(env.workload)

    async def _publish_until_stored(self, env: pb.Envelope) -> None:
        while True:
            try:
                await self.publisher.publish(env)
            except Retry as exc:
                log.warning("publish of %s failed, retrying: %s", env.type, exc)
                await asyncio.sleep(self.retry_s)
                continue
            except Reject as exc:
                log.error("cannot publish %s for %s: %s", env.type, env.workload, exc)
            return


def waves_by_workload(envs: Sequence[pb.Envelope]) -> list[list[pb.Envelope]]:
    """Split `envs` into waves: the n-th wave holds each workload's n-th envelope, in order."""
    waves: list[list[pb.Envelope]] = []
    seen: dict[str, int] = {}
    for env in envs:
        n = seen.get(env.workload, 0)
        seen[env.workload] = n + 1
        if n == len(waves):
            waves.append([])
        waves[n].append(env)
    return waves
