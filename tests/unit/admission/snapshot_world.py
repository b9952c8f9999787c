"""A stream of stored bytes, a live replica consuming it, and rebuilds from it (with or without
a snapshot), for the snapshot tests. Pure: no NATS."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

import msgspec
from admission_stream import SideBySide
from nats_subjects import subject_matches

from muster.admission.handlers import Rounds
from muster.admission.rebuild import Stored, rebuild, replay_event, restore
from muster.admission.snapshot import CompactLog, Snapshot
from muster.admission.state import AdmissionState
from muster.api.model import KueueConfig
from muster.bus import decode
from muster.bus.subjects import subject_of
from muster.contracts.v1 import events_pb2 as pb


class StoredStream(SideBySide):
    """MUSTER_EVENTS as the bytes stored, sequence n at index n - 1; the replica's Publisher."""

    def __init__(self) -> None:
        self.data: list[bytes] = []

    def put(self, env: pb.Envelope) -> int:
        self.data.append(env.SerializeToString())
        return len(self.data)

    async def publish(self, env: pb.Envelope, **_: object) -> int:
        return self.put(env)

    async def dead_letter_unstored(self, env: pb.Envelope, *, consumer: str, reason: str) -> int:
        raise AssertionError(f"{env.type} for {env.workload} refused: {reason}")

    @property
    def last(self) -> int:
        return len(self.data)

    def envelope(self, seq: int) -> pb.Envelope:
        env = decode(self.data[seq - 1])
        env.sequence = seq
        return env

    async def replay(
        self, subjects: Sequence[str], *, from_sequence: int = 1, until_sequence: int | None = None
    ) -> AsyncIterator[pb.Envelope]:
        """As `Bus.replay`: the stored events on `subjects`, in stream order."""
        for seq in range(max(1, from_sequence), (until_sequence or self.last) + 1):
            env = self.envelope(seq)
            if any(subject_matches(s, subject_of(env)) for s in subjects):
                yield env

    def types(self, seqs: tuple[int, ...]) -> list[tuple[str, str]]:
        """(payload field, workload or config name) of each stored event in `seqs`."""
        out = []
        for seq in seqs:
            env = self.envelope(seq)
            field = env.WhichOneof("payload") or ""
            name = env.config_applied.name if field == "config_applied" else env.workload
            out.append((field, name))
        return out


class LiveReplica:
    """A replica owning the only shard, consuming `stream` in batches as the service does;
    the reports in `unread` are not delivered to it, as its consumer's filters would not."""

    def __init__(
        self,
        stream: StoredStream,
        *,
        clock: list[float],
        unread: Collection[str] = (),
        kueue: KueueConfig | None = None,
    ) -> None:
        self.stream = stream
        self.unread = tuple(sorted(unread))
        self.state = AdmissionState(kueue=kueue)
        self.state.take_ownership(now_s=0.0)
        self.history = CompactLog(self.state.ledger)
        self.rounds = Rounds(self.state, stream, clock=lambda: clock[0], history=self.history)
        self.consumed = 0

    async def consume(self, most: int) -> None:
        """One fetched batch: up to `most` of the events not consumed yet."""
        seqs = range(self.consumed + 1, min(self.stream.last, self.consumed + most) + 1)
        delivered = [
            (env, self.stream.data[env.sequence - 1])
            for env in map(self.stream.envelope, seqs)
            if env.WhichOneof("payload") not in self.unread
        ]
        await self.rounds.apply_batch([e for e, _ in delivered], [d for _, d in delivered])
        self.consumed = seqs[-1] if seqs else self.consumed

    async def catch_up(self, *, batch: int = 8) -> None:
        """Consume until nothing is left, its own decisions' echoes included."""
        while self.consumed < self.stream.last:
            await self.consume(batch)

    def snapshot(self) -> Snapshot:
        # As the service: every event up to the last consumed is accounted for.
        snapshot = self.history.snapshot(sequence=max(self.consumed, self.state.last_sequence))
        return msgspec.structs.replace(snapshot, unread=self.unread)


def rebuilt(
    stream: StoredStream, snapshot: Snapshot | None = None, *, kueue: KueueConfig | None = None
) -> tuple[AdmissionState, CompactLog]:
    """A new replica's state (not owning yet): `snapshot`, then the stream after it (all of it
    without one), as `AdmissionService.start` replays them; and its log."""
    state = AdmissionState(kueue=kueue)
    history = CompactLog(state.ledger)
    if snapshot is not None:
        restore(state, snapshot, history=history, max_event_bytes=1 << 20)
    for seq in range(state.last_sequence + 1, stream.last + 1):
        replay_event(state, stream.envelope(seq), history=history, data=stream.data[seq - 1])
    return state, history


class OneSnapshot:
    """The snapshots' bucket holding `snapshot` alone (`rebuild.SnapshotStore`)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    async def available(self, *, stream: str, at_most: int) -> list[Stored]:
        partitions = frozenset(self.snapshot.partitions)
        return [Stored(self.snapshot.sequence, "admission-0", partitions)]

    async def load(self, stored: Stored, *, stream: str) -> Snapshot:
        return self.snapshot


async def rebuilt_by_service(
    stream: StoredStream, snapshot: Snapshot, *, kueue: KueueConfig | None = None
) -> AdmissionState:
    """A new replica's state (not owning yet) as `AdmissionService.start` rebuilds it, from
    `snapshot` and `stream`, with Kueue's configuration `kueue`."""
    state = AdmissionState(kueue=kueue)
    await rebuild(
        stream,
        state,
        history=CompactLog(state.ledger),
        snapshots=OneSnapshot(snapshot),  # type: ignore[arg-type]
        stream_created="",
        end=stream.last,
        max_event_bytes=1 << 20,
    )
    return state


async def rebuilt_from(
    source: str, stream: StoredStream, snapshot: Snapshot, *, kueue: KueueConfig | None = None
) -> AdmissionState:
    """A new replica's state rebuilt from `source`: "stream" (all of it), "snapshot" (it
    alone), or "service" (both, as `AdmissionService.start` reads them)."""
    match source:
        case "stream":
            return rebuilt(stream, kueue=kueue)[0]
        case "snapshot":
            state = AdmissionState(kueue=kueue)
            restore(state, snapshot, history=CompactLog(state.ledger), max_event_bytes=1 << 20)
            return state
        case "service":
            return await rebuilt_by_service(stream, snapshot, kueue=kueue)
    raise ValueError(f"no such source: {source}")


def summary(state: AdmissionState) -> dict[str, Any]:
    """What a rebuild must get right: the ledger (arrival order as a ranking), recently finished
    workloads, where ClusterQueues were applied, the last sequence."""
    ledger = state.ledger
    return {
        "entries": {k: dataclasses.replace(e, order=0) for k, e in ledger.entries.items()},
        "arrivals": [e.key for e in ledger.live()],
        "finished": list(ledger.finished),
        "cluster_queue_clusters": dict(state.cluster_queue_clusters),
        "last_sequence": state.last_sequence,
    }


def taking_over(state: AdmissionState, *, now_s: float) -> dict[str, Any]:
    """What the rebuilt replica decides when it takes ownership, and its engine after that."""
    events = state.take_ownership(now_s=now_s)
    engine = state.engine
    return {
        "events": [(e.type, e.object, e.reason, e.message) for e in events],
        "phases": {k: engine.phase(k) for k in sorted(engine.records)},
        "admissions": {k: state.admission_of(k) for k in sorted(engine.records)},
        "cluster_queues": dict(engine.config.cluster_queues),
        "local_queues": dict(engine.config.local_queues),
    }
