"""Stories and reports that follow their workload to its home (homes.py), inside a round.

`Relocator.run` publishes, in this order, before the round decides:
1. reports that arrived in one of this replica's partitions about a workload whose home is
   another replica's (a publisher still named the old one): each forwarded there on its own;
2. `state.moves`: each workload's story (every event the replica keeps about it, `CompactLog`)
   forwarded to its new home, the i-th events of every story side by side. A story forwarded
   to one of this replica's own partitions is kept from then on as those forwards;
3. `state.handovers`: the partition a LocalQueue came from is fenced and its workloads' stories
   are fetched from that partition's history (`StoryFetch`, handover.py), forwarded here and
   applied, so the round that follows counts their quota.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, Protocol

from muster.admission.fact_reader import fact_of
from muster.admission.forwarding import forwarded, unwrap
from muster.admission.homes import Handover, Move, queue_key
from muster.admission.snapshot import CompactLog
from muster.admission.state import AdmissionState
from muster.bus.cancel import gather_or_cancel
from muster.bus.partitions import parse_token
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event

Story = list[tuple[int, bytes]]  # (stream sequence, the event as stored), in stream order


class Report(NamedTuple):
    """An event to pass on to `to_partition` on its own."""

    data: bytes
    sequence: int
    to_partition: int
    local_queue: str


class Outgoing(NamedTuple):
    """A story to forward to `to_partition`, stored in `from_partition`."""

    story: Story
    to_partition: int
    from_partition: int | None
    local_queue: str


class StoryFetch(Protocol):
    """Fence `handover.from_partition` and read its stories of `handover.local_queue`."""

    async def __call__(self, handover: Handover) -> list[Story]: ...


Store = Callable[[pb.Envelope], Awaitable[int]]  # publish until stored; its sequence


class Relocator:
    """Forwards what must follow its workload, for the rounds of one replica."""

    def __init__(
        self,
        state: AdmissionState,
        history: CompactLog,
        store: Store,
        *,
        fetch: StoryFetch | None,
        max_event_bytes: int,
    ) -> None:
        self.state = state
        self.history = history
        self.store = store
        self.fetch = fetch
        self.max_event_bytes = max_event_bytes

    async def run(self, reports: Sequence[Report], *, now_s: float) -> list[Event]:
        """Forward `reports`, the state's moves and handovers; what applying the handed-over
        stories reported (the round decides after)."""
        if not reports and not self.state.moves and not self.state.handovers:
            return []  # most rounds: nothing to forward, and no coroutine to run for it
        source = self.state.source
        await gather_or_cancel(
            *(
                self.store(
                    forwarded(
                        r.data,
                        r.sequence,
                        to_partition=r.to_partition,
                        from_partition=None,
                        local_queue=r.local_queue,
                        source=source,
                    )
                )
                for r in reports
            )
        )
        await self.moves()
        events: list[Event] = []
        handovers, self.state.handovers = self.state.handovers, []
        for handover in handovers:
            events += await self._hand_over(handover, now_s=now_s)
        return events

    async def moves(self) -> None:
        """Forward the story of every workload in `state.moves` to its home."""
        if not self.state.moves:
            return
        moves, self.state.moves = self.state.moves, {}
        ledger, owned = self.state.ledger, self.state.sharding.owned
        outgoing: list[tuple[Move, Outgoing]] = []
        for move in moves.values():
            entry = ledger.get(move.key)
            if entry is None:
                continue
            queue = queue_key(entry.workload.meta.namespace, entry.queue_name)
            story = self.history.story_of(move.key)
            outgoing.append((move, Outgoing(story, move.to_partition, entry.partition, queue)))
        stored = await self._forward([o for _, o in outgoing])
        for (move, _), forwards in zip(outgoing, stored, strict=True):
            self.state.moved(move.key, move.to_partition)
            if move.to_partition in owned:
                self.history.forget(move.key)
                for env in forwards:  # its story is kept as its home's from now on
                    self.history.add(env)

    async def _forward(self, outgoing: Sequence[Outgoing]) -> list[list[pb.Envelope]]:
        """Forward each story to its partition, the i-th events side by side; the forwards as
        stored (sequence set), per story."""
        out: list[list[pb.Envelope]] = [[] for _ in outgoing]
        opened: list[int] = [0] * len(outgoing)  # sequence of each story's forwarded submitted
        for i in range(max((len(o.story) for o in outgoing), default=0)):
            wave = [(n, o.story[i]) for n, o in enumerate(outgoing) if i < len(o.story)]
            envs = [
                forwarded(
                    data,
                    seq,
                    to_partition=outgoing[n].to_partition,
                    from_partition=outgoing[n].from_partition,
                    local_queue=outgoing[n].local_queue,
                    source=self.state.source,
                    story_sequence=opened[n],
                )
                for n, (seq, data) in wave
            ]
            sequences = await gather_or_cancel(*(self.store(env) for env in envs))
            for (n, _), env, seq in zip(wave, envs, sequences, strict=True):
                env.sequence = seq
                if i == 0:
                    opened[n] = seq
                out[n].append(env)
        return out

    async def _hand_over(self, handover: Handover, *, now_s: float) -> list[Event]:
        """Fetch `handover`'s stories, forward them here and apply them."""
        if self.fetch is None:
            return []
        stories = await self.fetch(handover)
        stored = await self._forward(
            [
                Outgoing(
                    story, handover.to_partition, handover.from_partition, handover.local_queue
                )
                for story in stories
                if story
            ]
        )
        events: list[Event] = []
        for forwards in stored:
            for env in forwards:
                inner, forward = unwrap(env, max_event_bytes=self.max_event_bytes)
                known = inner.workload in self.state.ledger
                if not self.state.forwards.takes(
                    forward, inner, known=known, sequence=env.sequence
                ):
                    continue
                fact = fact_of(inner)
                if fact is not None:
                    events += self.state.apply(fact, now_s=now_s, story=True)
                self.history.add(env)
        return events


def arrived_on(env: pb.Envelope) -> int | None:
    """The partition `env` was stored in (None: one from before partitions)."""
    return parse_token(env.partition)
