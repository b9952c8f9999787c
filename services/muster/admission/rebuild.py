"""The rebuild's pieces: replaying stored events into the state, and the snapshots' bucket.

`replay_event` is the one path every stored event takes during a rebuild, a snapshot's and the
stream's alike: read as a fact (a forwarded one as the event it carries), replayed into
`AdmissionState`, kept in the `CompactLog`. `restoring_config` replays a snapshot's
configuration and partition records, `restoring_partitions` its events about some partitions,
each in steps that the service runs with a turn of the event loop between them (`in_steps`): a
million pending workloads' snapshot takes minutes to replay, and the shard lease is renewed on
the same loop (docs/services.md, "Long stretches").

`SnapshotStore` is the `MUSTER_SNAPSHOTS` object store bucket: object `admission-<shard>`
holds the last snapshot written by that shard's replica, its sequence and the partitions it
covers in the object's headers. A replica's snapshot holds every configuration event and its
own partitions' workloads, so any snapshot seeds the configuration, and the newest covering a
partition seeds that partition (`available`, then `load`).
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import itertools
import logging
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Final, NamedTuple, Protocol

from muster.admission.fact_reader import fact_of
from muster.admission.forwarding import unwrap
from muster.admission.snapshot import (
    ANY,
    CONFIG,
    CompactLog,
    Snapshot,
    SnapshotDecoding,
    SnapshotError,
    inflate,
    partitions_in,
    sequence_in,
    snapshot_headers,
)
from muster.admission.state import AdmissionState
from muster.admission.subjects import (
    CONFIG_SUBJECTS,
    NO_REPORTS,
    replay_subjects,
    report_subjects,
    unread_reports,
)
from muster.api.model import Workload
from muster.bus import Bus, Reject, decode
from muster.bus.buckets import SNAPSHOTS_BUCKET
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.bus.errors import NotFound
from muster.bus.partitions import parse_token
from muster.contracts.v1 import events_pb2 as pb

# Chunks well under NATS's default max_payload (1 MiB): fewer round trips than nats-py's 128 KiB.
_CHUNK_BYTES: Final = 512 * 1024
_CONFIG_FIELDS: Final = frozenset({"config_applied", "config_deleted", "partition_changed"})
# Events replayed between two turns of the event loop: 10-50 ms of a loaded host's CPU, far
# below a renewal interval, and a turn per step costs nothing beside the replay.
RESTORE_STEP: Final = 512

log = logging.getLogger(__name__)


def replay_event(
    state: AdmissionState,
    env: pb.Envelope,
    *,
    history: CompactLog | None,
    data: bytes | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    decoded: Workload | None = None,
) -> None:
    """Replay one stored event (sequence set) into `state`, then keep it in `history` if the
    state depends on it (`data`: the event as stored; None: encoded again if kept; `decoded`:
    a `submitted`'s Workload as a snapshot kept it)."""
    inner, taken = env, True
    try:
        if env.WhichOneof("payload") == "forwarded":
            inner, forward = unwrap(env, max_event_bytes=max_event_bytes)
            known = inner.workload in state.ledger
            taken = state.forwards.takes(forward, inner, known=known, sequence=env.sequence)
        fact = fact_of(inner, decoded=decoded) if taken else None
    except ValueError as exc:
        log.warning("rebuild skips %s#%d: %s", env.type, env.sequence, exc)
        fact = None
    taken = state.replay(fact, sequence=env.sequence, cluster=inner.cluster) and taken
    if history is not None and taken:
        history.add(env, data)


def snapshot_events(
    snapshot: Snapshot, *, max_event_bytes: int, config: bool, partitions: Collection[int] = ()
) -> Iterator[tuple[pb.Envelope, bytes, Workload | None]]:
    """`snapshot`'s configuration events (`config`), or its events about `partitions` and
    those stored before partitions, decoded with the bus's checks (one it refuses is skipped,
    as a replay would), each with its sequence set, and the Workload kept of a `submitted`."""
    wanted = frozenset(partitions)
    for i, (seq, data) in enumerate(zip(snapshot.sequences, snapshot.events, strict=True)):
        tag = snapshot.tag_of(i)
        if tag >= 0 and (config or tag not in wanted):
            continue
        if tag == CONFIG and not config:
            continue
        try:
            env = decode(data, max_bytes=max_event_bytes)
        except Reject as err:
            log.warning("rebuild skips snapshot event #%d: %s", seq, err)
            continue
        if tag == ANY and (env.WhichOneof("payload") in _CONFIG_FIELDS) != config:
            continue  # version 1 tags nothing: what it is says which part it belongs to
        env.sequence = seq
        yield env, data, snapshot.workload_of(i)


def restoring_config(
    state: AdmissionState, snapshot: Snapshot, *, history: CompactLog | None, max_event_bytes: int
) -> Iterator[None]:
    """Replay `snapshot`'s configuration and partition records into a new `state`, in steps:
    yields after every RESTORE_STEP events."""
    events = snapshot_events(snapshot, max_event_bytes=max_event_bytes, config=True)
    for n, (env, data, _) in enumerate(events, 1):
        replay_event(state, env, history=history, data=data, max_event_bytes=max_event_bytes)
        if n % RESTORE_STEP == 0:
            yield


def restore(
    state: AdmissionState, snapshot: Snapshot, *, history: CompactLog | None, max_event_bytes: int
) -> None:
    """Replay all of `snapshot` into a new `state`: its configuration, then the partitions it
    covers. Afterwards `state.last_sequence` is the snapshot's: the stream is read on after."""
    # Before its records are replayed: its usage already holds what they carried.
    state.usage_carry.restored_from(dict.fromkeys(snapshot.partitions, snapshot.sequence))
    steps = itertools.chain(
        restoring_config(state, snapshot, history=history, max_event_bytes=max_event_bytes),
        restoring_partitions(
            state, snapshot, snapshot.partitions, history=history, max_event_bytes=max_event_bytes
        ),
    )
    for _ in steps:
        pass
    state.last_sequence = max(state.last_sequence, snapshot.sequence)


def restoring_partitions(
    state: AdmissionState,
    snapshot: Snapshot,
    partitions: Collection[int],
    *,
    history: CompactLog | None,
    max_event_bytes: int,
    left_out: Sequence[pb.Envelope] = (),
) -> Iterator[None]:
    """Replay `snapshot`'s finished workloads and its events about `partitions`, in order,
    in steps (yields after every RESTORE_STEP events); with `left_out` (stored events its
    writer did not read, ascending sequences: `left_out_of`) merged in where the stream had
    them, as if its writer had read them."""
    state.ledger.remember_finished(snapshot.finished)
    state.restore_usage(snapshot.usage, partitions, sequence=snapshot.sequence)
    events = snapshot_events(
        snapshot, max_event_bytes=max_event_bytes, config=False, partitions=partitions
    )
    extra = ((env, None, None) for env in left_out)
    last = 0
    merged = heapq.merge(events, extra, key=lambda e: e[0].sequence)
    for n, (env, data, decoded) in enumerate(merged, 1):
        if env.sequence == last:
            continue  # in the snapshot too: a writer that read it once (its log kept it)
        last = env.sequence
        replay_event(
            state, env, history=history, data=data, max_event_bytes=max_event_bytes,
            decoded=decoded,
        )  # fmt: skip
        if n % RESTORE_STEP == 0:
            yield


async def in_steps(steps: Iterator[None]) -> None:
    """Run `steps`, giving the event loop a turn between two: a renewal of the shard lease due
    meanwhile runs (it needs two or three turns: its write, its answer, the check)."""
    for _ in steps:
        await asyncio.sleep(0)


async def left_out_of(
    stream: History, snapshot: Snapshot, partitions: Collection[int], *, unread: Collection[str]
) -> list[pb.Envelope]:
    """The reports about `partitions` up to `snapshot`'s sequence that its writer did not read
    and a replica not leaving out `unread` does (none when it read them all), from the stream.

    A writer with waitForPodsReady off keeps no `pods_ready`; without them a replica with it on
    would take workloads whose pods were ready for workloads still starting, and evict them at
    the timeout. What retention took from the stream is lost to it, as to any rebuild."""
    wanted = sorted(set(snapshot.unread) - set(unread))
    if not wanted or not partitions:
        return []
    subjects = report_subjects(wanted, partitions)
    found = [env async for env in stream.replay(subjects, until_sequence=snapshot.sequence)]
    log.info("snapshot at sequence %d was written without %s: %d read from the stream",
             snapshot.sequence, ", ".join(wanted), len(found))  # fmt: skip
    return found


@contextmanager
def rebuilding() -> Iterator[None]:
    """Around a replica's rebuild, until it has taken ownership: no cyclic garbage collection.

    A rebuild allocates tens of millions of objects at a million pending, nearly all of which
    live on; each full collection walked them all again (a fifth of the rebuild's CPU). Not
    frozen afterwards (`gc.freeze`): in a process that runs other services, or tests, what is
    frozen with the state would never be collected.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Stored(NamedTuple):
    """A snapshot in the bucket, as its headers announce it."""

    sequence: int
    name: str
    partitions: frozenset[int]


class SnapshotStore:
    """The snapshots' bucket (the bus's `ObjectBucket`, created when first written)."""

    def __init__(self, bus: Bus) -> None:
        self._bucket = bus.objects(
            SNAPSHOTS_BUCKET,
            description="admission snapshots (docs/services.md)",
            chunk_bytes=_CHUNK_BYTES,
        )

    async def put(self, name: str, snapshot: Snapshot, data: bytes) -> None:
        """Store `data` (`snapshot` encoded) as object `name`, replacing what it held.

        Raises the bus's `Unavailable`; the object keeps its last snapshot when a write fails.
        """
        await self._bucket.put(
            name,
            data,
            headers=snapshot_headers(snapshot),
            description=f"admission snapshot at sequence {snapshot.sequence}",
        )

    async def available(self, *, stream: str, at_most: int) -> list[Stored]:
        """The snapshots of the stream created at `stream` up to sequence `at_most` (the
        stream's last), newest first, as their headers announce them."""
        stored = []
        for info in await self._bucket.list():
            seq = sequence_in(info.headers, stream=stream)
            if seq is None:
                continue
            if seq > at_most:
                log.warning("snapshot %s is at sequence %d, past the stream's last (%d): ignored",
                            info.name, seq, at_most)  # fmt: skip
                continue
            stored.append(Stored(seq, info.name, partitions_in(info.headers)))
        return sorted(stored, reverse=True)

    async def load(self, stored: Stored, *, stream: str) -> Snapshot | None:
        """The snapshot `stored` names, or None (logged) when it cannot be read or is not
        what its headers say."""
        try:
            data = await self._bucket.get(stored.name)
            # In a thread: inflating 130 MB (a million pending) lets the loop run meanwhile.
            decoding = SnapshotDecoding(await asyncio.to_thread(inflate, data))
            await in_steps(decoding.steps())  # a slice of events at a time: the renewals run
            snapshot = decoding.snapshot
        except (NotFound, SnapshotError) as exc:  # deleted since it was listed, or torn
            log.warning("snapshot %s ignored: %s", stored.name, exc)
            return None
        if (snapshot.stream, snapshot.sequence) != (stream, stored.sequence):
            log.warning("snapshot %s ignored: it is not what its headers say", stored.name)
            return None
        return snapshot


class Rebuilt(NamedTuple):
    """What a rebuild read."""

    snapshot_events: int
    stream_events: int
    snapshot_sequence: int  # of the newest snapshot it read (0: none)
    unread: frozenset[str] = NO_REPORTS  # the reports it did not replay: the consumer's too


class History(Protocol):
    """What a rebuild reads the stream through (`Bus.replay`)."""

    def replay(
        self, subjects: Sequence[str], *, from_sequence: int = 1, until_sequence: int | None = None
    ) -> AsyncIterator[pb.Envelope]: ...


async def rebuild(
    stream: History,
    state: AdmissionState,
    *,
    history: CompactLog,
    snapshots: SnapshotStore | None,
    stream_created: str,
    end: int,
    max_event_bytes: int,
) -> Rebuilt:
    """Rebuild `state` to stream sequence `end`, in two passes (replay does not depend on the
    order of configuration and workload events: it only records them).

    1. Configuration: the newest readable snapshot's, then every `config.*` event after it.
       This says which partitions the replica decides (`config.partition` records).
    2. Those partitions: each from the newest snapshot covering it, then their events after
       it (an event at or below its partition's snapshot is in that snapshot already).
       The reports the configuration says this replica does not read (`unread_reports`) are
       not replayed; those a snapshot's writer left out and this replica reads are read from
       the stream and merged into that snapshot's events (`left_out_of`).
    `snapshots` None: no snapshot is read (`--snapshot-seconds 0`).
    """
    stored = (
        [] if snapshots is None else await snapshots.available(stream=stream_created, at_most=end)
    )
    loaded: dict[str, Snapshot | None] = {}

    async def load(item: Stored) -> Snapshot | None:
        if item.name not in loaded and snapshots is not None:
            loaded[item.name] = await snapshots.load(item, stream=stream_created)
        return loaded.get(item.name)

    counted, newest = 0, 0
    for item in stored:
        snapshot = await load(item)
        if snapshot is not None:
            await in_steps(
                restoring_config(state, snapshot, history=history, max_event_bytes=max_event_bytes)
            )
            newest = snapshot.sequence
            counted += len(snapshot.events)
            break
    replayed = 0
    async for env in stream.replay(CONFIG_SUBJECTS, from_sequence=newest + 1, until_sequence=end):
        replay_event(state, env, history=history, max_event_bytes=max_event_bytes)
        replayed += 1
    owned = state.sharding.owned
    unread = unread_reports(state.engine.kueue)
    covered: dict[int, int] = {}  # partition -> sequence of the snapshot it was restored from
    for item in stored:
        wanted = (item.partitions & owned) - covered.keys()
        snapshot = await load(item) if wanted else None
        if snapshot is None:
            continue
        left_out = await left_out_of(stream, snapshot, wanted, unread=unread)
        await in_steps(
            restoring_partitions(
                state, snapshot, wanted, history=history, max_event_bytes=max_event_bytes,
                left_out=left_out,
            )
        )  # fmt: skip
        covered |= dict.fromkeys(wanted, snapshot.sequence)
    low = min((covered.get(p, 0) for p in owned), default=end)
    async for env in stream.replay(
        replay_subjects(owned, unread=unread), from_sequence=low + 1, until_sequence=end
    ):
        partition = parse_token(env.partition)
        if env.sequence <= (low if partition is None else covered.get(partition, 0)):
            continue
        replay_event(state, env, history=history, max_event_bytes=max_event_bytes)
        replayed += 1
    state.last_sequence = max(state.last_sequence, end)
    return Rebuilt(counted, replayed, newest, unread)
