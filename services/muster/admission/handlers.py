"""The consumed events' path into the engine: handle → fact → round → publish → ack.

Every event type takes the same path. `Rounds.handle` (the consumer's handler) reads the event
as a fact (`translate.fact_of`) and hands it to the round loop, then waits: it returns, and the
bus acks, only once the round that applied the fact has published all it decided and JetStream
has acknowledged each event. Facts that arrive together (the consumer runs many lanes) are
applied together, in stream order, and decided by one `schedule()`.

A round that fails to publish retries with the same event ids (JetStream drops the copies), so
a decision the engine has made is never lost while the process lives; if it dies, the next
owner rebuilds from the stream, which holds exactly what was published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from muster.admission.state import AdmissionState
from muster.admission.translate import Fact, FactError, Recorded, envelopes_of, fact_of
from muster.bus import Reject, Retry
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class Publisher(Protocol):
    """What rounds publish through: `Bus.publish` returns once JetStream has the event."""

    async def publish(self, env: pb.Envelope) -> int: ...


@dataclass(slots=True)
class _Pending:
    env: pb.Envelope
    fact: Fact
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class AppliedSequences:
    """Stream sequences already applied: everything up to the rebuild's end, then each one.

    A redelivered event (its ack was lost) is skipped. Only recent ones are remembered: a
    redelivery comes within the ack wait, and applying an old event again changes nothing.
    """

    def __init__(self, floor: int = 0, *, keep: int = 65536) -> None:
        self.floor = floor
        self.keep = keep
        self._seen: set[int] = set()

    def __contains__(self, sequence: object) -> bool:
        return isinstance(sequence, int) and (sequence <= self.floor or sequence in self._seen)

    def add(self, sequence: int) -> None:
        self._seen.add(sequence)
        if len(self._seen) > self.keep:
            ordered = sorted(self._seen)
            self.floor = max(self.floor, ordered[len(ordered) // 2])
            self._seen = {s for s in ordered if s > self.floor}


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
    ) -> None:
        self.state = state
        self.publisher = publisher
        self.clock = clock
        self.on_round = on_round
        self.retry_s = retry_s
        self.lock = asyncio.Lock()  # one round at a time; readers of the engine take it too
        self.applied = AppliedSequences(state.last_sequence)
        self._inbox: list[_Pending] = []
        self._wake = asyncio.Event()
        self._closed = False
        self.rounds = 0

    # --- the consumer's handler ------------------------------------------------------------

    async def handle(self, env: pb.Envelope) -> None:
        """Apply `env` in the next round; return once what that round decided is stored."""
        if env.sequence in self.applied:
            return  # replayed during the rebuild, or a redelivery: already applied
        try:
            fact = fact_of(env)
        except FactError as exc:
            raise Reject(str(exc)) from exc
        if fact is None:
            return
        if isinstance(fact, Recorded) and fact.source == self.state.source:
            self.applied.add(env.sequence)
            return  # our own decision: recorded when we published it
        if self._closed:
            raise Retry(1.0, "admission is stopping")
        pending = _Pending(env, fact)
        self._inbox.append(pending)
        self._wake.set()
        await pending.done

    # --- rounds ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Run rounds until cancelled: whenever facts arrive, and when an engine timer is due.

        When it stops, every event still waiting for a round is given back (Retry), so the
        consume loop can nak it and finish.
        """
        try:
            while True:
                wakeup = self.state.next_wakeup_s()
                timeout = None if wakeup is None else max(0.0, wakeup - self.clock())
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                self._wake.clear()
                await asyncio.sleep(0)  # let lanes that are ready join this round
                batch, self._inbox = self._inbox, []
                try:
                    await self.round(batch)
                except BaseException as exc:
                    self._give_back(batch, exc)
                    raise
        finally:
            self._closed = True
            self._give_back(self._inbox, None)
            self._inbox = []

    @staticmethod
    def _give_back(batch: Sequence[_Pending], exc: BaseException | None) -> None:
        for p in batch:
            if not p.done.done():
                p.done.set_exception(Retry(1.0, f"no round for this event: {exc!r}"))

    async def round(self, batch: Sequence[_Pending]) -> None:
        """Apply `batch` in stream order, decide once, publish, then release the handlers."""
        async with self.lock:
            now_s = self.clock()
            events: list[Event] = []
            ordered = sorted(batch, key=lambda p: p.env.sequence)
            for p in ordered:
                try:
                    events += self.state.apply(p.fact, now_s=now_s)
                except Exception as exc:  # a bug: this event fails (redelivered, then DLQ)
                    log.exception(
                        "applying %s failed", p.env.type, extra={"workload": p.env.workload}
                    )
                    p.done.set_exception(exc)
                    continue
                self.applied.add(p.env.sequence)
            events += self.state.decide(now_s=now_s)
            cause = ordered[-1].env if ordered else self._tick_cause(now_s)
            await self.publish(events, cause=cause)
            self.rounds += 1
        for p in ordered:
            if not p.done.done():
                p.done.set_result(None)
        self.on_round()

    async def catch_up(self, events: Sequence[Event], *, replay_end: int) -> None:
        """Publish what taking ownership decided, with ids fixed by the rebuild's end."""
        cause = pb.Envelope(event_id=f"rebuild/{self.state.source}/{replay_end}")
        async with self.lock:
            await self.publish(events, cause=cause)
        self.on_round()

    def _tick_cause(self, now_s: float) -> pb.Envelope:
        return pb.Envelope(event_id=f"timer/{self.state.source}/{round(now_s * 1000)}")

    async def publish(self, events: Sequence[Event], *, cause: pb.Envelope) -> None:
        """Publish the decisions in `events`, each after the previous one's PubAck.

        A temporary failure is retried with the same envelope (same id) until it is stored.
        """
        state = self.state
        envs = envelopes_of(state.decisions(events), cause=cause, source=state.source)
        published: list[Recorded] = []
        for env in envs:
            while True:
                try:
                    await self.publisher.publish(env)
                except Retry as exc:
                    log.warning("publish of %s failed, retrying: %s", env.type, exc)
                    await asyncio.sleep(self.retry_s)
                    continue
                except Reject as exc:
                    log.error("cannot publish %s for %s: %s", env.type, env.workload, exc)
                break
            fact = fact_of(env)
            if isinstance(fact, Recorded):
                published.append(fact)
        state.record_published(published)
