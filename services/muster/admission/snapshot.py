"""Admission snapshots: the compacted replay log of a replica, and how it is stored. Pure.

A rebuild replays `MUSTER_EVENTS`, whose retention (7 days, 10 GiB) would forget a workload
that lives longer than its own `submitted`. So each replica keeps in memory the bytes of every
event its state still depends on (`CompactLog`): for each live workload, every event about it
since its `submitted`; for each configuration object, its latest `config.applied`; for each
partition, its latest `config.partition` records. Every `--snapshot-seconds` the service stores
them as a `Snapshot`, with the last sequence they account for, the partitions they cover and
the ledger's recently finished workloads; a rebuild replays a snapshot's events through the same
path as the stream's, then the stream after the snapshot (`rebuild.py`). The log is also where a
workload's story is forwarded from when its home moves (homes.py).

The events are kept as stored, not as state: a snapshot is read by the code that reads the
stream, so a replica of another version reads it the same way it reads history. Each event is
tagged with the partition it tells about (`CONFIG` for configuration, `ANY` for an event stored
before partitions), so a replica that takes a partition over restores that partition's part.
"""

from __future__ import annotations

import io
import logging
import zlib
from collections.abc import Iterator, Mapping
from itertools import chain, islice, pairwise
from typing import Final

import msgspec

from muster.admission.facts import RECORDED, WORKLOAD_FACTS
from muster.admission.forwarding import original
from muster.admission.ledger import Entry, Ledger
from muster.api.model import Workload, WorkloadKey
from muster.bus.partitions import PARTITIONS, parse_token
from muster.contracts.v1 import events_pb2 as pb
from muster.core.config_owners import config_key

VERSION: Final = 2  # of the encoding; a reader reads its own and version 1 (partitions: ANY)
CONFIG: Final = -2  # the tag of a configuration event or a partition record
ANY: Final = -1  # the tag of an event stored before partitions: every partition's history
EVERY: Final = tuple(range(PARTITIONS))
# Object headers, so that a reader picks the newest snapshot without downloading each one.
SEQUENCE_HEADER: Final = "Muster-Snapshot-Sequence"
STREAM_HEADER: Final = "Muster-Snapshot-Stream"
VERSION_HEADER: Final = "Muster-Snapshot-Version"
PARTITIONS_HEADER: Final = "Muster-Snapshot-Partitions"  # "0,1,2", "-": none; absent: all
# zlib level 1: most of the gain of level 6 (the events' JSON manifests repeat a lot) at a
# fraction of the time (docs/services.md, "Admission snapshots").
_ZLIB_LEVEL: Final = 1
_WORKLOAD_FIELDS: Final = frozenset((*WORKLOAD_FACTS, *RECORDED, "forwarded"))
_ENCODER: Final = msgspec.msgpack.Encoder()
_SLICE: Final = 4096  # events encoded at a time, and decoded at a time (`SLICES`)
_INFLATE_PART: Final = 1 << 20  # compressed bytes inflated at a time (about 6 MiB out)
_WORKLOAD: Final = msgspec.msgpack.Decoder(Workload)
_LONG: Final = ("sequences", "events", "tags", "workloads")  # an item per event: in slices
# Stored after them: per long field, each slice's (items, bytes), so that a reader decodes one
# slice at a time. A reader that does not know it skips it and decodes each field in one call.
SLICES: Final = "slices"
_SLICES: Final = msgspec.msgpack.Decoder(dict[str, tuple[tuple[int, int], ...]])
_FIELDS: Final = msgspec.msgpack.Decoder(dict[str, msgspec.Raw])

ConfigKey = tuple[str, str]  # (kind, name) of config.applied and config.deleted: config_key
# config.partition records kept: per partition the last record (the fence) and the last move.
_RECORD = "config.partition"
_MOVE = "config.partition/move"
_TAKEOVER = "config.partition/takeover"  # the last term's since the last move (takeover.py)
_RECORD_KINDS = (_RECORD, _MOVE, _TAKEOVER)  # one record may be the last of several kinds


log = logging.getLogger(__name__)


class SnapshotError(ValueError):
    """A snapshot that cannot be read: corrupt, inconsistent, or of another version."""


class EndedUsage(msgspec.Struct, frozen=True, kw_only=True):
    """What finished and deleted workloads left in one LocalQueue's admission fair sharing
    usage (`core.admission_fair_sharing`), as of `at_s`: their stories are not in a snapshot,
    live workloads' are (their runs come back as they are replayed)."""

    local_queue: str  # namespace/name
    partition: int  # its home when written: restored with that partition
    at_s: float
    consumed: dict[str, float]  # resource -> amount, in Kubernetes units


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What a replica's state depends on, as of stream sequence `sequence`."""

    version: int = VERSION
    # The stream's creation time: sequences of a stream deleted and made again start over.
    stream: str = ""
    sequence: int  # every event up to here is accounted for; a rebuild reads on from the next
    sequences: tuple[int, ...] = ()  # the stream sequence of each of `events`, ascending
    events: tuple[bytes, ...] = ()  # Envelopes, as stored in MUSTER_EVENTS
    finished: tuple[str, ...] = ()  # the ledger's recently finished workloads, oldest first
    # The partitions whose history it holds (version 1: every one), and each event's tag:
    # its partition, CONFIG or ANY (version 1: none, read as ANY).
    partitions: tuple[int, ...] = EVERY
    tags: tuple[int, ...] = ()
    # Per event: a live workload's first kept `submitted` as the ledger took it (its manifest
    # decoded and validated), None or b"" for the rest; () in a snapshot written before it was
    # kept. Taken (`CompactLog.snapshot`) as the Workload, stored and read as its msgpack
    # bytes, each decoded only as its event is replayed: decoded all at once, they were a
    # rebuild's peak memory. A rebuild takes it instead of decoding each manifest again (40 %
    # of its time). Added without a new version: a reader that does not know it skips it.
    workloads: tuple[Workload | bytes | None, ...] = ()
    # The reports its writer did not read (admission/subjects.py, `unread_reports`), so the log
    # holds none: a replica that reads them replays them from the stream (rebuild.py). Added
    # without a new version, as `workloads`: a snapshot without it was written reading all.
    unread: tuple[str, ...] = ()
    # Admission fair sharing: per LocalQueue of its partitions, what retired workloads left.
    # Added without a new version, as `unread`: a reader that does not know it (or a snapshot
    # without it) starts each LocalQueue from what its live workloads' stories hold.
    usage: tuple[EndedUsage, ...] = ()

    def tag_of(self, i: int) -> int:
        return self.tags[i] if self.tags else ANY

    def workload_of(self, i: int) -> Workload | None:
        """The Workload kept beside event `i`; None when none is, or when this reader's model
        cannot decode it (the manifest is decoded instead)."""
        kept = self.workloads[i] if self.workloads else None
        if not isinstance(kept, bytes):
            return kept
        if not kept:
            return None
        try:
            return _WORKLOAD.decode(kept)
        except msgspec.DecodeError as exc:
            log.warning("snapshot event #%d: its decoded workload is unreadable (%s): its "
                        "manifest is decoded instead", self.sequences[i], exc)  # fmt: skip
            return None

    @property
    def size(self) -> int:
        """Bytes of the events it holds."""
        return sum(map(len, self.events))


_READABLE: Final = (1, VERSION)
_HEAD: Final = msgspec.msgpack.Decoder(Snapshot)  # read without its long fields
_VERSION: Final = msgspec.msgpack.Decoder(int)
_ITEMS: Final = {  # a long field's slice: an array of its items
    field.name: msgspec.msgpack.Decoder(field.type)
    for field in msgspec.structs.fields(Snapshot)
    if field.name in _LONG
}


def _tag_of(env: pb.Envelope) -> int:
    """The partition an event tells about (the one it was stored in), ANY when none."""
    partition = parse_token(env.partition)
    return ANY if partition is None else partition


class CompactLog:
    """The stored events a replica's state depends on, in stream order.

    `add` every event the state applied (replayed or consumed, its own decisions' echoes too),
    right after the state applied it: whether its workload is live is read from `ledger`.
    Cost per event: a dict insert and a list append, or, once a workload has finished or was
    deleted, dropping its events.
    """

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        # By sequence: consumed events come in stream order, the replica's own as it stores them.
        self._events: dict[int, bytes] = {}
        # Per live workload: the tag of its first kept event, then the sequences kept. An event
        # tagged otherwise (forwarded from its old home) is in `_moved`; a configuration event
        # is tagged CONFIG. A tag per event was a dict entry each: 0.13 GiB at a million pending.
        self._workloads: dict[str, list[int]] = {}
        self._moved: dict[int, int] = {}  # by sequence: a workload event's other tag
        # The latest config.applied of each object, a Namespace of each cluster (config_key).
        self._config: dict[ConfigKey, int] = {}
        ledger.submissions = self.submitted_manifests  # read back, not kept twice

    def submitted_manifests(self, key: str) -> tuple[str, str]:
        """Live workload `key`'s manifests (Workload, owner) as its kept `submitted` carries
        them, ("", "") when none is kept. The first kept is the one the ledger took: a later
        `submitted` of a live workload is a copy, and a deleted workload's story was dropped."""
        for seq in self._kept(key):
            env, _, _ = original(self._events[seq], seq)
            if env.WhichOneof("payload") == "submitted":
                return env.submitted.manifest_json, env.submitted.owner_manifest_json
        return "", ""

    def __len__(self) -> int:
        return len(self._events)

    def _kept(self, key: str) -> list[int]:
        """The sequences kept about live workload `key`, in stream order."""
        return self._workloads.get(key, [ANY])[1:]

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
            key = env.workload  # a forwarded event names the workload it carries an event of
            entry = self._ledger.entries.get(WorkloadKey(key))
            if entry is not None:
                self._keep(seq, env, data)
                tag = _tag_of(env)
                kept = self._workloads.get(key)
                if kept is None:
                    self._workloads[entry.key] = [tag, seq]  # the ledger's copy of the key
                else:
                    kept.append(seq)
                    if tag != kept[0]:
                        self._moved[seq] = tag
            else:
                self.forget(key)
        elif field == "config_applied":
            config = config_key(env.config_applied.kind, env.config_applied.name, env.cluster)
            self._drop_config(config)
            self._config[config] = seq
            self._keep(seq, env, data)
        elif field == "config_deleted":
            deleted = env.config_deleted
            self._drop_config(config_key(deleted.kind, deleted.name, env.cluster))
        elif field == "partition_changed":
            partition = str(env.partition_changed.partition)
            self._drop_config((_RECORD, partition))
            self._config[(_RECORD, partition)] = seq
            change = env.partition_changed.WhichOneof("change")
            if change == "shard":
                self._drop_config((_MOVE, partition))
                self._drop_config((_TAKEOVER, partition))  # a new decider's terms from here
                self._config[(_MOVE, partition)] = seq
            elif change == "taken_over":
                self._drop_config((_TAKEOVER, partition))
                self._config[(_TAKEOVER, partition)] = seq
            self._keep(seq, env, data)

    def _keep(self, seq: int, env: pb.Envelope, data: bytes | None) -> None:
        self._events[seq] = env.SerializeToString() if data is None else data

    def forget(self, key: str) -> None:
        """Drop what is kept about workload `key`."""
        for old in self._workloads.pop(key, [ANY])[1:]:
            self._events.pop(old, None)
            self._moved.pop(old, None)

    def story_of(self, key: str) -> list[tuple[int, bytes]]:
        """The events kept about workload `key`, in stream order, with their sequences."""
        return [(seq, self._events[seq]) for seq in self._kept(key)]

    def _drop_config(self, key: ConfigKey) -> None:
        old = self._config.pop(key, None)
        if old is None:
            return
        kind, name = key
        if kind in _RECORD_KINDS and any(self._config.get((k, name)) == old for k in _RECORD_KINDS):
            return  # the last record of its partition is also its last move or takeover
        self._events.pop(old, None)

    def snapshot(
        self, *, sequence: int, stream: str = "", partitions: tuple[int, ...] = EVERY
    ) -> Snapshot:
        """What the log holds, as of `sequence` (the last sequence the state applied) of the
        stream created at `stream`, for `partitions` (those the replica decides).

        Copies references only (the bytes are shared), so it is cheap to take between rounds
        and encode afterwards. The replica's own decisions are kept as they are stored, which
        may be past `sequence` (the consumer has not read up to them): those are left to the
        stream after the snapshot, which a rebuild reads anyway.
        """
        seqs = [seq for seq in self._events if seq <= sequence]
        if any(a > b for a, b in pairwise(seqs)):
            seqs.sort()
        tags = self._tags_by_sequence()
        return Snapshot(
            stream=stream,
            sequence=sequence,
            sequences=tuple(seqs),
            events=tuple(self._events[seq] for seq in seqs),
            finished=tuple(self._ledger.finished),
            partitions=partitions,
            tags=tuple(
                t if isinstance(t, int) else self._workloads[t.key][0]
                for t in map(tags.__getitem__, seqs)
            ),
            workloads=tuple(
                None if isinstance(t, int) else t.workload for t in map(tags.__getitem__, seqs)
            ),
        )

    def _tags_by_sequence(self) -> dict[int, int | Entry]:
        """Each kept event's tag, by sequence; for a live workload's first kept event (the
        `submitted` the ledger took) its ledger entry, whose workload's tag it has. Built for a
        snapshot, then dropped: one table, not one more by sequence for the Workloads."""
        entries = self._ledger.entries
        tags: dict[int, int | Entry] = dict.fromkeys(self._config.values(), CONFIG)
        for key, kept in self._workloads.items():
            entry = entries.get(WorkloadKey(key))
            tags[kept[1]] = kept[0] if entry is None else entry
            for seq in islice(kept, 2, None):
                tags[seq] = kept[0]
        tags.update(self._moved)
        return tags


def encode_snapshot(snapshot: Snapshot) -> bytes:
    """`snapshot` as stored: msgpack, compressed with zlib.

    Encoded and compressed a slice of events at a time: the whole encoding is as large as every
    event kept (0.8 GiB at a million pending), and held at once it was the replica's peak. The
    compressed parts go into one buffer that becomes the result: joined from a list, they were
    held twice (0.13 GiB more at a million pending). Each slice's size is stored after them
    (`SLICES`), so that a reader decodes them one at a time too (`SnapshotDecoding`)."""
    fields = msgspec.structs.asdict(snapshot)
    long = {name: fields.pop(name) for name in _LONG}
    head = _ENCODER.encode(fields)  # a fixmap (under 16 fields): its first byte says how many
    out = zlib.compressobj(_ZLIB_LEVEL)
    buffer = io.BytesIO()
    buffer.write(out.compress(bytes((head[0] + len(long) + 1,)) + head[1:]))  # long ones last
    slices: dict[str, list[tuple[int, int]]] = {}
    for name, items in long.items():
        buffer.write(out.compress(_ENCODER.encode(name) + _array_header(len(items))))
        sizes = slices[name] = []
        for start in range(0, len(items), _SLICE):
            part = items[start : start + _SLICE]
            if name == "workloads":  # each its own bytes, decoded one at a time when read
                part = tuple(
                    _ENCODER.encode(w) if isinstance(w, Workload) else w or b"" for w in part
                )
            body = memoryview(_ENCODER.encode(part))[len(_array_header(len(part))) :]
            sizes.append((len(part), len(body)))
            buffer.write(out.compress(body))
    buffer.write(out.compress(_ENCODER.encode(SLICES) + _ENCODER.encode(slices)))
    buffer.write(out.flush())
    return buffer.getvalue()  # CPython hands over the buffer itself, trimmed: no copy


def _array_header(length: int) -> bytes:
    """msgpack's header of an array of `length` items."""
    if length < 16:
        return bytes((0x90 | length,))
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


def _read_array_header(data: memoryview) -> tuple[int, int]:
    """The length of the msgpack array `data` starts with, and the size of its header."""
    first = data[0] if data else 0
    if first & 0xF0 == 0x90:
        return first & 0x0F, 1
    size = {0xDC: 2, 0xDD: 4}.get(first)
    if size is None or len(data) < 1 + size:
        raise SnapshotError(f"an array was expected, not byte {first:#04x}")
    return int.from_bytes(data[1 : 1 + size], "big"), 1 + size


def inflate(data: bytes) -> bytes:
    """A stored snapshot, uncompressed: run it in a thread (zlib lets go of the interpreter).

    A part at a time, into one buffer: `zlib.decompress` joins its output into the result
    holding the interpreter, 1.2 s at a million pending on a loaded host (0.8 GiB)."""
    inflating = zlib.decompressobj()
    buffer = io.BytesIO()
    try:
        for start in range(0, len(data), _INFLATE_PART):
            buffer.write(inflating.decompress(data[start : start + _INFLATE_PART]))
        buffer.write(inflating.flush())
    except zlib.error as exc:
        raise SnapshotError(f"not a snapshot: {exc}") from None
    if not inflating.eof or inflating.unused_data:
        raise SnapshotError("not a snapshot: it is cut short, or followed by more")
    return buffer.getvalue()  # the buffer itself, trimmed: no copy


def decode_snapshot(data: bytes) -> Snapshot:
    """The snapshot in `data` (as stored), decoded in one go: `SnapshotDecoding`."""
    decoding = SnapshotDecoding(inflate(data))
    for _ in decoding.steps():
        pass
    return decoding.snapshot


class SnapshotDecoding:
    """An inflated snapshot, decoded in steps (`steps`), each a slice of its events: at a
    million pending, decoded in one call it held the interpreter 8.7 s on a loaded host, past
    the shard lease's TTL. Then `snapshot`. Raises SnapshotError when the snapshot is corrupt,
    inconsistent or of another version than this reader's (`VERSION`).

    A snapshot written before `SLICES` were stored has each long field decoded in one step."""

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self._snapshot: Snapshot | None = None

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            raise RuntimeError("the snapshot is read once its steps have run")
        return self._snapshot

    def steps(self) -> Iterator[None]:
        try:
            fields = _FIELDS.decode(self._raw)  # each field's bytes: the long ones skipped
            version = _VERSION.decode(fields["version"]) if "version" in fields else None
        except msgspec.DecodeError as exc:
            raise SnapshotError(f"not a snapshot: {exc}") from None
        if version not in _READABLE:
            raise SnapshotError(f"snapshot version {version}, this replica reads {_READABLE}")
        try:
            sizes = _SLICES.decode(fields.pop(SLICES)) if SLICES in fields else {}
            long = {name: fields.pop(name) for name in _LONG if name in fields}
            head = _HEAD.decode(_ENCODER.encode(fields))
        except msgspec.DecodeError as exc:
            raise SnapshotError(f"corrupt snapshot: {exc}") from None
        yield
        decoded: dict[str, tuple[object, ...]] = {}
        for name, field in long.items():
            parts: list[tuple[object, ...]] = []
            yield from _decode_slices(name, field, sizes.get(name), parts)
            decoded[name] = tuple(chain.from_iterable(parts))
        snapshot = msgspec.structs.replace(head, **decoded)
        yield from _check(snapshot)
        self._snapshot = snapshot


def _decode_slices(
    name: str,
    field: msgspec.Raw,
    sizes: tuple[tuple[int, int], ...] | None,
    into: list[tuple[object, ...]],
) -> Iterator[None]:
    """Decode long field `name` (stored as `field`) into `into`, a slice of `sizes` at a time
    (None: all at once), yielding after each."""
    try:
        if sizes is None:
            into.append(_ITEMS[name].decode(field))
            return
        data = memoryview(field)
        length, at = _read_array_header(data)
        for items, size in sizes:
            if items < 0 or size < 0 or at + size > len(data):
                raise SnapshotError(f"{name}: slice of {items} items in {size} bytes past its end")
            into.append(_ITEMS[name].decode(_array_header(items) + data[at : at + size]))
            at += size
            yield
    except msgspec.DecodeError as exc:
        raise SnapshotError(f"corrupt snapshot: {name}: {exc}") from None
    if at != len(data) or sum(items for items, _ in sizes) != length:
        raise SnapshotError(f"{name}: its slices do not make its {length} items")


def _check(snapshot: Snapshot) -> Iterator[None]:
    """Raise SnapshotError when `snapshot` is inconsistent; yields between slices of events."""
    seqs = snapshot.sequences
    if len(seqs) != len(snapshot.events):
        raise SnapshotError(f"{len(seqs)} sequences for {len(snapshot.events)} events")
    if snapshot.tags and len(snapshot.tags) != len(seqs):
        raise SnapshotError(f"{len(snapshot.tags)} tags for {len(seqs)} events")
    if snapshot.workloads and len(snapshot.workloads) != len(seqs):
        raise SnapshotError(f"{len(snapshot.workloads)} workloads for {len(seqs)} events")
    if any(not 0 <= p < PARTITIONS for p in snapshot.partitions):
        raise SnapshotError(f"partitions {snapshot.partitions} out of 0..{PARTITIONS - 1}")
    for start in range(0, len(seqs), _SLICE):
        if any(a >= b for a, b in pairwise(seqs[start : start + _SLICE + 1])):
            raise SnapshotError("event sequences out of order")
        yield
    if seqs and (seqs[0] < 1 or seqs[-1] > snapshot.sequence):
        raise SnapshotError(f"event sequences {seqs[0]}..{seqs[-1]} beyond {snapshot.sequence}")


def snapshot_headers(snapshot: Snapshot) -> dict[str, list[str]]:
    """The stored object's headers (NATS headers: each a list of values)."""
    return {
        SEQUENCE_HEADER: [str(snapshot.sequence)],
        STREAM_HEADER: [snapshot.stream],
        VERSION_HEADER: [str(snapshot.version)],
        PARTITIONS_HEADER: [",".join(map(str, snapshot.partitions)) or "-"],
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
        return int(sequence) if int(version) in _READABLE and written_for == stream else None
    except (TypeError, ValueError):
        return None


def partitions_in(headers: Mapping[str, object] | None) -> frozenset[int]:
    """The partitions a stored snapshot's headers say it covers (none said: every one)."""
    try:
        listed = _first((headers or {}).get(PARTITIONS_HEADER))
        if listed == "-":
            return frozenset()
        return frozenset(p for p in map(int, listed.split(",")) if 0 <= p < PARTITIONS)
    except (TypeError, ValueError):  # absent (version 1), or not ours
        return frozenset(range(PARTITIONS))


def _first(value: object) -> str:
    """A header's first value: a list of strings as NATS writes them, or one string."""
    if isinstance(value, list) and value:
        value = value[0]
    elif value is None:
        value = ""  # a header written empty: NATS may leave it out
    if not isinstance(value, str):
        raise TypeError(f"header value {value!r}")
    return value
