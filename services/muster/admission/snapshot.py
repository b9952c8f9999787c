"""Admission snapshots: the compacted replay log of a replica, and how it is stored. Pure.

A rebuild replays `MUSTER_EVENTS`, whose retention (7 days, 10 GiB) would forget a workload
that lives longer than its own `submitted`. So each replica keeps in memory the bytes of every
event its state still depends on (`CompactLog`): for each live workload, every event about it
since its `submitted`; for each configuration object, its latest `config.applied`. Every
`--snapshot-seconds` the service stores them as a `Snapshot`, with the last sequence they
account for and the ledger's recently finished workloads; a rebuild replays a snapshot's events
through the same path as the stream's, then the stream after the snapshot (`rebuild.py`).

The events are kept as stored, not as state: a snapshot is read by the code that reads the
stream, so a replica of another version reads it the same way it reads history.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from itertools import pairwise
from typing import Final

import msgspec

from muster.admission.ledger import Ledger
from muster.admission.translate import RECORDED, WORKLOAD_FACTS
from muster.contracts.v1 import events_pb2 as pb

VERSION: Final = 1  # of the encoding; a reader reads its own version only
# Object headers, so that a reader picks the newest snapshot without downloading each one.
SEQUENCE_HEADER: Final = "Muster-Snapshot-Sequence"
STREAM_HEADER: Final = "Muster-Snapshot-Stream"
VERSION_HEADER: Final = "Muster-Snapshot-Version"
# zlib level 1: most of the gain of level 6 (the events' JSON manifests repeat a lot) at a
# fraction of the time (docs/services.md, "Admission snapshots").
_ZLIB_LEVEL: Final = 1
_WORKLOAD_FIELDS: Final = frozenset((*WORKLOAD_FACTS, *RECORDED))

ConfigKey = tuple[str, str]  # (kind, name) as config.applied and config.deleted name them


class SnapshotError(ValueError):
    """A snapshot that cannot be read: corrupt, inconsistent, or of another version."""


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What a replica's state depends on, as of stream sequence `sequence`."""

    version: int = VERSION
    # The stream's creation time: sequences of a stream deleted and made again start over.
    stream: str = ""
    sequence: int  # every event up to here is accounted for; a rebuild reads on from the next
    sequences: tuple[int, ...] = ()  # the stream sequence of each of `events`, ascending
    events: tuple[bytes, ...] = ()  # Envelopes, as stored in MUSTER_EVENTS
    finished: tuple[str, ...] = ()  # the ledger's recently finished workloads, oldest first

    @property
    def size(self) -> int:
        """Bytes of the events it holds."""
        return sum(map(len, self.events))


class _Versioned(msgspec.Struct):
    version: int


class CompactLog:
    """The stored events a replica's state depends on, in stream order.

    `add` every event the state applied (replayed or consumed, its own decisions' echoes too),
    right after the state applied it: whether its workload is live is read from `ledger`.
    Cost per event: a dict insert and a list append, or, once a workload has finished or was
    deleted, dropping its events.
    """

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._events: dict[int, bytes] = {}  # by sequence; added in stream order, so sorted
        self._workloads: dict[str, list[int]] = {}  # the sequences kept for each live workload
        self._config: dict[ConfigKey, int] = {}  # the latest config.applied of each object

    def __len__(self) -> int:
        return len(self._events)

    def add(self, env: pb.Envelope, data: bytes | None = None) -> None:
        """Keep `env` (stored as `data`; encoded again when None) if the state depends on it.

        Call in stream order, after the state applied `env`. An event about a workload that is
        not live then (it finished, was deleted, or was never accepted) drops what was kept
        about it; one about a live workload is kept, even one that changed nothing (a late
        report, a copy): replaying it changes nothing either.
        """
        field = env.WhichOneof("payload")
        seq = env.sequence
        if field in _WORKLOAD_FIELDS:
            key = env.workload
            if key in self._ledger.entries:
                self._events[seq] = env.SerializeToString() if data is None else data
                kept = self._workloads.get(key)
                if kept is None:
                    self._workloads[key] = [seq]
                else:
                    kept.append(seq)
            else:
                for old in self._workloads.pop(key, ()):
                    self._events.pop(old, None)
        elif field == "config_applied":
            config = (env.config_applied.kind, env.config_applied.name)
            self._drop_config(config)
            self._config[config] = seq
            self._events[seq] = env.SerializeToString() if data is None else data
        elif field == "config_deleted":
            self._drop_config((env.config_deleted.kind, env.config_deleted.name))

    def _drop_config(self, key: ConfigKey) -> None:
        old = self._config.pop(key, None)
        if old is not None:
            self._events.pop(old, None)

    def snapshot(self, *, sequence: int, stream: str = "") -> Snapshot:
        """What the log holds, as of `sequence` (the last sequence the state applied) of the
        stream created at `stream`.

        Copies references only (the bytes are shared), so it is cheap to take between rounds
        and encode afterwards.
        """
        return Snapshot(
            stream=stream,
            sequence=sequence,
            sequences=tuple(self._events),
            events=tuple(self._events.values()),
            finished=tuple(self._ledger.finished),
        )


def encode_snapshot(snapshot: Snapshot) -> bytes:
    """`snapshot` as stored: msgpack, compressed with zlib."""
    return zlib.compress(msgspec.msgpack.encode(snapshot), _ZLIB_LEVEL)


def decode_snapshot(data: bytes) -> Snapshot:
    """The snapshot in `data`; raises SnapshotError when it is corrupt, inconsistent or of
    another version than this reader's (`VERSION`)."""
    try:
        raw = zlib.decompress(data)
        version = msgspec.msgpack.decode(raw, type=_Versioned).version
    except (zlib.error, msgspec.DecodeError) as exc:
        raise SnapshotError(f"not a snapshot: {exc}") from None
    if version != VERSION:
        raise SnapshotError(f"snapshot version {version}, this replica reads {VERSION}")
    try:
        snapshot = msgspec.msgpack.decode(raw, type=Snapshot)
    except msgspec.DecodeError as exc:
        raise SnapshotError(f"corrupt snapshot: {exc}") from None
    seqs = snapshot.sequences
    if len(seqs) != len(snapshot.events):
        raise SnapshotError(f"{len(seqs)} sequences for {len(snapshot.events)} events")
    if any(a >= b for a, b in pairwise(seqs)):
        raise SnapshotError("event sequences out of order")
    if seqs and (seqs[0] < 1 or seqs[-1] > snapshot.sequence):
        raise SnapshotError(f"event sequences {seqs[0]}..{seqs[-1]} beyond {snapshot.sequence}")
    return snapshot


def snapshot_headers(snapshot: Snapshot) -> dict[str, list[str]]:
    """The stored object's headers (NATS headers: each a list of values)."""
    return {
        SEQUENCE_HEADER: [str(snapshot.sequence)],
        STREAM_HEADER: [snapshot.stream],
        VERSION_HEADER: [str(snapshot.version)],
    }


def sequence_in(headers: Mapping[str, object] | None, *, stream: str) -> int | None:
    """The sequence a stored snapshot's headers announce; None when they announce none, or
    another version than this replica's, or a stream other than the one created at `stream`."""
    if not headers:
        return None
    try:
        version, sequence, written_for = (
            _first(headers.get(h)) for h in (VERSION_HEADER, SEQUENCE_HEADER, STREAM_HEADER)
        )
        return int(sequence) if int(version) == VERSION and written_for == stream else None
    except (TypeError, ValueError):
        return None


def _first(value: object) -> str:
    """A header's first value: a list of strings as NATS writes them, or one string."""
    if isinstance(value, list) and value:
        value = value[0]
    elif value is None:
        value = ""  # a header written empty: NATS may leave it out
    if not isinstance(value, str):
        raise TypeError(f"header value {value!r}")
    return value
