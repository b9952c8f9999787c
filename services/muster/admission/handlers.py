"""Rounds: consumed events into the engine, in stream order, one `schedule()` per batch.

`Rounds.apply_batch(envelopes)` is what the in-order consumer (`muster.bus.ordered`) calls
with the events it fetched together, in stream order. Each event is read as a fact
(`fact_reader.fact_of`) and applied; then the engine decides once, and every decision is
published, a workload's each after the previous one's PubAck (but an `admitted` right after its
`quota_reserved`: `sent_together`). Only then does the consumer ack the batch.

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
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, Protocol

from opentelemetry import trace

from muster.admission.decision_reads import own_records
from muster.admission.decisions import envelopes_of
from muster.admission.fact_reader import fact_of
from muster.admission.facts import RECORDED, Delete, Fact, FactError, Finish
from muster.admission.forwarding import reported_key, unwrap
from muster.admission.lease import doubt_settled
from muster.admission.relocation import Relocator, Report, StoryFetch
from muster.admission.snapshot import CompactLog
from muster.admission.state import AdmissionState
from muster.admission.subjects import NO_REPORTS, unread_reports
from muster.api.model import WorkloadKey
from muster.bus import BusError, Conflict, Reject, Retry
from muster.bus.cancel import finishing, gather_or_cancel, raise_if_cancelling
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.bus.partitions import parse_token, token
from muster.bus.publisher import Fence, waves_by_workload
from muster.bus.pulse import Pulse
from muster.bus.subjects import record_filter
from muster.bus.tracing import headers_of_envelope, recording, start_span, trace_decisions
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class Publisher(Protocol):
    """What rounds publish through: `Bus.publish` returns once JetStream has the event; with an
    expected last sequence it raises Conflict when another writer came first."""

    async def publish(
        self,
        env: pb.Envelope,
        *,
        expected_last_subject_sequence: int | None = None,
        fenced_on: str | None = None,
    ) -> int: ...

    async def publish_together(
        self, envs: Sequence[pb.Envelope], fences: Sequence[Fence | None]
    ) -> list[int | BusError]:
        """Each of `envs` sent, fenced where given, then their PubAcks awaited as one
        (`Bus.publish_together`): per envelope its sequence, or why it is not stored."""
        ...

    async def dead_letter_unstored(
        self, env: pb.Envelope, *, consumer: str, reason: str
    ) -> int: ...


class RoundObserver(Protocol):
    """What rounds report to when metrics are on (`admission.metrics.AdmissionMetrics`)."""

    def round(
        self, facts: Sequence[Fact], events: Sequence[Event], *, decide_s: float | None
    ) -> None: ...

    def published(self, seconds: float) -> None: ...


MAX_LINKS = 128  # traces a round's span links to, at most (a batch holds up to 256 facts)


class Reown(Exception):  # noqa: N818 (an outcome the service acts on, as Conflict)
    """The partitions this replica decides changed under it (a record moved one, or fenced a
    decision out): its state may hold decisions that were not stored, so it rebuilds."""


class Item(NamedTuple):
    """One consumed event: as stored, the event it carries (itself, or what it forwards)
    and what that means to admission."""

    env: pb.Envelope
    data: bytes | None
    inner: pb.Envelope
    fact: Fact | None
    forward: pb.WorkloadForwarded | None = None


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
        fetch: StoryFetch | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        dead_letters: str = "admission",
        guard: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.state = state
        # Raises (LeaseLostError) when this replica may no longer decide: awaited before each
        # send of decisions (it renews the lease first when the last renewal is old), so that
        # a replica resumed after its lease lapsed publishes nothing.
        self.guard = guard
        self.dead_letters = dead_letters  # `muster.v1.dlq.<this>`: decisions refused for good
        self.metrics = metrics
        # Workload → the trace (W3C headers) its decisions are published in.
        self.traces: dict[str, dict[str, str]] = {}
        # What the state depends on (snapshot.py), and what a moving story is forwarded from.
        self.history = history if history is not None else CompactLog(state.ledger)
        self.publisher = publisher
        self.clock = clock
        self.on_round = on_round
        self.retry_s = retry_s
        self.max_event_bytes = max_event_bytes
        self.relocator = Relocator(
            state, self.history, self._store, fetch=fetch, max_event_bytes=max_event_bytes
        )
        self.lock = asyncio.Lock()  # one round at a time; readers of the engine take it too
        self.rounds = 0
        self.unread: frozenset[str] = NO_REPORTS  # reports its consumer leaves out (subjects.py)
        self._timers_changed = asyncio.Event()
        self._timer_at: float | None = None  # the timer `run_timers` waits for (None: none)

    # --- consumed events -------------------------------------------------------------------

    async def apply_batch(
        self, envs: Sequence[pb.Envelope], raw: Sequence[bytes] | None = None
    ) -> list[Reject | None]:
        """Apply `envs` (in stream order) in one round; per event, None or why it is rejected.

        Returns once every decision of the round is stored. Events at or below the last
        applied sequence (replayed by the rebuild, or redelivered) are skipped. `raw` holds the
        envelopes as stored, for the snapshot log (without it, what it keeps is encoded again).
        Raises Reown when the replica must rebuild before deciding again.
        """
        outcomes: list[Reject | None] = [None] * len(envs)
        items: list[Item] = []
        for i, env in enumerate(envs):
            if env.sequence and env.sequence <= self.state.last_sequence:
                continue
            field = env.WhichOneof("payload")
            if env.source == self.state.source and (field in RECORDED or field == "forwarded"):
                continue  # our own, kept when published: not even decoded
            try:
                items.append(self._read(env, None if raw is None else raw[i]))
            except FactError as exc:
                outcomes[i] = Reject(str(exc))
        # The decisions' cause: the last event applied (their ids derive from it). A batch of
        # echoes changed nothing a round could act on. (No event at all asks for a round: the
        # cluster registry does, when a worker cluster changes.)
        rejected = (
            await self._round(items, cause=items[-1].env if items else None)
            if items or not envs
            else {}
        )
        for item in items:
            if isinstance(item.fact, Finish | Delete):
                self.traces.pop(item.inner.workload, None)  # its last decisions are published
        for i, env in enumerate(envs):
            if env.event_id in rejected:
                outcomes[i] = rejected[env.event_id]
            self.state.last_sequence = max(self.state.last_sequence, env.sequence)
        return outcomes

    def _read(self, env: pb.Envelope, data: bytes | None) -> Item:
        """`env` as admission reads it; raises FactError when it cannot be read."""
        inner, forward = env, None
        if env.WhichOneof("payload") == "forwarded":
            inner, forward = unwrap(env, max_event_bytes=self.max_event_bytes)
        fact = fact_of(inner)
        if fact is not None:
            fact = self.state.counted(fact, cluster=inner.cluster)
        if inner.traceparent and inner.workload not in self.traces:
            self.traces[inner.workload] = headers_of_envelope(inner.traceparent, inner.tracestate)
        return Item(env, data, inner, fact, forward)

    async def _round(
        self, items: Sequence[Item], *, cause: pb.Envelope | None
    ) -> dict[str, Reject]:
        rejected: dict[str, Reject] = {}
        async with self.lock:
            started_ns = time.time_ns()
            started = time.perf_counter()
            now_s = self.clock()
            version = self.state.engine.version
            events: list[Event] = []
            reports: list[Report] = []
            facts: list[tuple[pb.Envelope, Fact]] = []
            for item in items:
                try:
                    applied = self._apply(item, reports, now_s=now_s)
                except Exception as exc:  # a bug: dead-letter this event, keep the others
                    log.exception(
                        "applying %s failed", item.env.type, extra={"workload": item.env.workload}
                    )
                    rejected[item.env.event_id] = Reject(f"admission could not apply it: {exc!r}")
                    continue
                if applied is None:
                    continue
                events += applied
                if item.fact is not None:
                    facts.append((item.inner, item.fact))
                # After it applied: the log reads from the ledger whether its workload lives.
                self.history.add(item.env, item.data)
            events += await self.relocator.run(reports, now_s=now_s)
            if self.state.superseded and self.guard is not None:  # takeover.py
                why, self.state.superseded = self.state.superseded, ""
                await doubt_settled(why, self.guard)
            if self.state.repartitioned:
                raise Reown("a config.partition record moved a partition to or from here")
            if self.unread and self.unread - unread_reports(self.state.engine.kueue):
                # Its consumer and log left them out: read from the stream again, then on.
                raise Reown("waitForPodsReady was turned on: pods_ready is read from now on")
            # The engine counts every call that returns events as a change, decide's included:
            # what tells is whether applying the facts changed it, or the round decided anything.
            changed = self.state.engine.version != version
            if items and not changed and self.state.settled():
                # Nothing for the engine (history, another replica's workloads, reports passed
                # on): the last round's decisions stand.
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
        self._timers_moved()
        if changed:  # the views are the engine's: a round about other replicas' workloads,
            self.on_round()  # or one that decided nothing, leaves them as they were
        return rejected

    def _apply(self, item: Item, reports: list[Report], *, now_s: float) -> list[Event] | None:
        """Apply one item; None when it is not taken at all (a forwarded story this replica
        has, a report taken already). A report about a workload whose home another replica
        decides is passed on (`reports`), and applied here too (its ledger entry follows)."""
        state, fact, forward = self.state, item.fact, item.forward
        if fact is None:
            return []
        if forward is not None:
            known = item.inner.workload in state.ledger
            if not state.forwards.takes(
                forward, item.inner, known=known, sequence=item.env.sequence
            ):
                return None
        elif (key := reported_key(fact)) is not None:
            target = state.forward_target(key, arrived_on=parse_token(item.env.partition))
            if target is not None:
                data = item.data or item.env.SerializeToString()
                reports.append(Report(data, item.env.sequence, target, state.queue_of(key)))
        if forward is not None and forward.story:
            return state.apply(fact, now_s=now_s, story=True)
        return state.apply(fact, now_s=now_s)

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

    async def run_timers(self, pulse: Pulse) -> None:
        """Run a round whenever the engine's next timer is due, until cancelled; `pulse` says
        when the next is due (a round that hangs past it is a stall: bus/pulse.py)."""
        while True:
            raise_if_cancelling()
            wakeup = self._timer_at = self.state.next_wakeup_s()
            timeout = None if wakeup is None else max(0.0, wakeup - self.clock())
            pulse.beat(timeout)
            self._timers_changed.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._timers_changed.wait()  # a round brought the next timer nearer
                continue
            except TimeoutError:
                pass
            due = self.state.next_wakeup_s()
            if due is None or due > self.clock():
                continue  # a round moved it later (or took it away): wait for that instead
            with pulse.handling():  # what the round reads from the stream advances it
                await finishing(self._round((), cause=None))  # its events are being published

    def _timers_moved(self) -> None:
        """Wake `run_timers` when a round brought the next timer nearer than the one it waits
        for. Most rounds leave it as it was (no timer at all, most often), and a wake-up per
        round is a fixed cost that a replica deciding a few workloads per round feels."""
        wakeup = self.state.next_wakeup_s()
        if wakeup is not None and (self._timer_at is None or wakeup < self._timer_at):
            self._timers_changed.set()

    async def catch_up(self, events: Sequence[Event], *, replay_end: int) -> None:
        """Forward the stories that must still follow their workloads (a replica may have died
        before it had), then publish what taking ownership decided, with ids fixed by the
        rebuild's end."""
        cause = pb.Envelope(event_id=f"rebuild/{self.state.source}/{replay_end}")
        async with self.lock:
            await self.relocator.moves()
            if self.metrics is not None:
                self.metrics.round((), events, decide_s=None)
            await self.publish(events, cause=cause)
        self._timers_moved()
        self.on_round()

    def _tick_cause(self, now_s: float) -> pb.Envelope:
        return pb.Envelope(event_id=f"timer/{self.state.source}/{round(now_s * 1000)}")

    # --- publishing ------------------------------------------------------------------------

    async def publish(
        self, events: Sequence[Event], *, cause: pb.Envelope, started_ns: int | None = None
    ) -> None:
        """Publish the decisions in `events`: one workload's in order, workloads side by side.

        Each wave holds at most one decision per workload and starts once the previous wave is
        stored, so a workload's decisions are stored in the order made while a round of many
        workloads costs a few round trips, not one per event; a wave of admissions right after
        their reservations goes with them (`sent_together`).
        A temporary failure is retried with the same envelope (same id) until it is stored.
        Each goes in its workload's trace (`started_ns`: when its span starts, if recorded),
        in its workload's partition, fenced on that partition's last record (Reown when a
        newer one fenced it out), and into the ledger and the log once stored. A workload routed
        to a partition other than its home's has its story forwarded there after its `routed`,
        and its next decisions go there (homes.py).
        """
        state = self.state
        decisions = state.decisions(events)
        envs = envelopes_of(decisions, cause=cause, source=state.source)
        records = own_records(decisions, envs)
        spans = trace_decisions(
            envs, service="admission", trace_of=self._trace_of, start_ns=started_ns
        )
        started = time.perf_counter()
        try:
            for waves in sent_together(waves_by_workload(envs)):
                if self.guard is not None:
                    await self.guard()
                sent = [env for wave in waves for env in wave]
                for env in sent:
                    env.partition = token(state.partition_for(WorkloadKey(env.workload)))
                if len(sent) == 1:  # most rounds at a few workloads each: a frame less
                    await self._publish_until_stored(sent[0])
                else:
                    await self._store_together(sent)
                state.record_published(
                    [r for env in sent if (r := records.get(env.event_id)) is not None]
                )
                for env in sorted(sent, key=_sequence):  # the log keeps stream order
                    self.history.add(env)
                    if env.WhichOneof("payload") == "routed":
                        state.routed_home(WorkloadKey(env.workload))
                await self.relocator.moves()
        finally:
            for span in spans:
                span.end()
        if self.metrics is not None and envs:
            self.metrics.published(time.perf_counter() - started)

    def _trace_of(self, env: pb.Envelope) -> dict[str, str] | None:
        return self.traces.get(env.workload)

    async def _store_together(self, envs: Sequence[pb.Envelope]) -> None:
        """Store decisions side by side (at most one per workload), each fenced on its
        partition's last record; their sequences are set. All are sent, then their PubAcks
        awaited in this task: a task each would cost two more hand-offs per round. A fence lost
        raises Reown at once (nothing of the round is left in flight); what failed for now is
        sent again alone, after `retry_s`, until stored."""
        results = await self.publisher.publish_together(envs, [self._fence(e) for e in envs])
        again: list[pb.Envelope] = []
        for env, result in zip(envs, results, strict=True):
            if isinstance(result, int):
                env.sequence = result
            elif isinstance(result, Conflict):
                raise _fenced_out(env, result) from result
            elif isinstance(result, Reject):
                await self._dead_letter(env, result)
            else:
                again.append(env)
        if again:
            log.warning("publish of %d decisions failed, retrying: %s", len(again), results)
            await asyncio.sleep(self.retry_s)
            await gather_or_cancel(*(self._publish_until_stored(env) for env in again))

    def _fence(self, env: pb.Envelope) -> Fence | None:
        """What a decision's write is fenced on: its partition's last record (none without
        a partition)."""
        partition = parse_token(env.partition)
        if partition is None:
            return None
        return self.state.fences.get(partition, 0), record_filter(partition)

    async def _publish_until_stored(self, env: pb.Envelope) -> None:
        """Publish a decision, fenced on its partition's last record; its sequence is set."""
        fence = self._fence(env)
        if fence is None:
            await self._store(env)
            return
        try:
            await self._store(env, expected_last_subject_sequence=fence[0], fenced_on=fence[1])
        except Conflict as exc:
            raise _fenced_out(env, exc) from exc

    async def _store(
        self,
        env: pb.Envelope,
        *,
        expected_last_subject_sequence: int | None = None,
        fenced_on: str | None = None,
    ) -> int:
        """Publish `env` until JetStream has it (a temporary failure is retried with the same
        id); its sequence (0: refused for good, logged)."""
        while True:
            try:
                env.sequence = await self.publisher.publish(
                    env,
                    expected_last_subject_sequence=expected_last_subject_sequence,
                    fenced_on=fenced_on,
                )
            except Retry as exc:
                log.warning("publish of %s failed, retrying: %s", env.type, exc)
                await asyncio.sleep(self.retry_s)
                continue
            except Reject as exc:
                await self._dead_letter(env, exc)
            return env.sequence

    async def _dead_letter(self, env: pb.Envelope, refused: Reject) -> None:
        """A decision JetStream refuses for good (its size): kept in the dead-letter stream with
        why, for an operator to see; retried while even that cannot be stored."""
        log.error("cannot publish %s for %s: %s", env.type, env.workload, refused)
        reason = f"JetStream refused this decision: {refused}"
        while True:
            try:
                await self.publisher.dead_letter_unstored(
                    env, consumer=self.dead_letters, reason=reason
                )
                return
            except Retry as exc:
                log.warning("dead-lettering %s failed, retrying: %s", env.type, exc)
                await asyncio.sleep(self.retry_s)


def sent_together(waves: Sequence[list[pb.Envelope]]) -> list[list[list[pb.Envelope]]]:
    """Group `waves` into what is sent without waiting for the PubAcks in between: a wave
    joins the previous one's group when each of its decisions is an `admitted` right after a
    `quota_reserved` with no admission check to pass, in a group with no `routed` (which moves
    where the next decisions go). Sent in order on one connection, they are stored in order;
    when a reconnect loses the first and stores the second, the `admitted` comes first, and
    readers take it as both (docs/events.md, "Order"). Rounds of one workload that reserve and
    admit at once cost one round trip instead of two."""
    groups: list[list[list[pb.Envelope]]] = []
    last: dict[str, pb.Envelope] = {}  # each workload's decision in the wave before
    for wave in waves:
        if groups and _joins(wave, groups[-1], last):
            groups[-1].append(wave)
        else:
            groups.append([wave])
        last.update((env.workload, env) for env in wave)
    return groups


def _joins(
    wave: list[pb.Envelope], group: list[list[pb.Envelope]], last: dict[str, pb.Envelope]
) -> bool:
    if any(env.WhichOneof("payload") == "routed" for sent in group for env in sent):
        return False
    return all(_admits_what_it_reserved(env, last.get(env.workload)) for env in wave)


def _admits_what_it_reserved(env: pb.Envelope, before: pb.Envelope | None) -> bool:
    return (
        env.WhichOneof("payload") == "admitted"
        and before is not None
        and before.WhichOneof("payload") == "quota_reserved"
        and not before.quota_reserved.admission_checks
    )


def _sequence(env: pb.Envelope) -> int:
    return env.sequence


def _fenced_out(env: pb.Envelope, conflict: Conflict) -> Reown:
    """Why a round stops: a record of another owner fenced `env`'s partition out."""
    return Reown(f"a record fenced partition {parse_token(env.partition)} out: {conflict}")
