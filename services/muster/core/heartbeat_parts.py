"""Every layout of the `MUSTER_CLUSTERS` heartbeat as written, and a room in parts read whole.

A room that fits in one NATS message (max_payload) is one value, layout 2
(`muster.core.heartbeat`). A larger one is split (layout 3): key `<cluster>.part.<n>` holds the
rows of a run of nodes (in name order, with the tables they use) or a run of the placed
workloads; key `<cluster>`, the head, names each part by the digest of its bytes. The writer
puts the parts that changed, then the head, then deletes the parts past the new count; a
reader (`RoomReader`) takes a head only once it holds, for each part, the bytes that head
names, so it never combines parts of two heartbeats. A part the writer did not change is
neither written again nor decoded again. Pure.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Final, TypeVar, cast

import msgspec

from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import (
    RowCache,
    Tables,
    Wire,
    decode_wire,
    encode,
    pack,
    rooms_of,
    too_large_head,
    vetted_capacity_of,
    with_rows,
)

LAYOUT_PARTS: Final = 3
# Beyond this many parts a room is absurd (at 1 MiB max_payload, several hundred thousand
# nodes): the heartbeat says RoomTooLarge instead.
MAX_PARTS: Final = 64
# A part aims at this share of max_bytes: rows differ in length, and each part carries the
# tables its own rows use, so parts sized on the average must keep room to spare.
PART_FILL: Final = 0.5
PART_BYTES: Final = 128 * 1024  # what a part aims at when MAX_PARTS leaves room for it
# What a reader takes of one heartbeat, head and parts (`--heartbeat-max-bytes`); past it
# the heartbeat is refused (`refuse_oversized`) as one that does not decode is. MAX_PARTS
# values of max_payload are 64 MiB at NATS's default 1 MiB, 512 MiB at the 8 MiB NATS advises
# at most. The largest room that fits at 1 MiB, about 260 000 nodes whose every room differs
# (docs/multicluster.md, "Limits"), is some 23 MB: under the default, so no honest worker at
# the default max_payload is refused.
HEARTBEAT_MAX_BYTES: Final = 32 * 1024 * 1024
_PART: Final = ".part."

T = TypeVar("T")


class Part(Tables, frozen=True, kw_only=True, gc=False):
    """A `<cluster>.part.<n>` value: tables and rows, or placed workloads. It has no `cluster`:
    a reader before layout 3 refuses it as a heartbeat instead of taking it for a room."""

    layout: int = LAYOUT_PARTS


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True):
    """What to put: `head` at `<cluster>`, each of `parts` at `part_key(cluster, n)`; and
    what lets the next heartbeat reuse the parts whose runs did not change."""

    head: bytes
    parts: tuple[bytes, ...] = ()
    too_large: str = ""  # why the head tells no room ("" when it tells the cluster's)
    per_part: int = 0  # nodes (or placed workloads) per part: the next heartbeat starts there
    runs: tuple[tuple[object, ...], ...] = ()  # each part's nodes (or placed workloads)
    digests: tuple[str, ...] = ()
    cache: RowCache | None = None  # what packing learned of each node


def part_key(cluster: str, n: int) -> str:
    return f"{cluster}{_PART}{n}"


def parts_pattern(cluster: str) -> str:
    """The NATS pattern of `cluster`'s part keys."""
    return f"{cluster}{_PART}*"


def cluster_of_part(key: str) -> str | None:
    """The cluster whose part `key` is, or None for a head (a cluster id has no dot)."""
    found = part_of(key)
    return None if found is None else found[0]


def part_of(key: str) -> tuple[str, int] | None:
    """The cluster and number of part `key`, or None for a head."""
    cluster, sep, n = key.partition(_PART)
    return (cluster, int(n)) if sep and n.isdigit() else None


def parts_named(head: bytes, *, cluster: str) -> int:
    """How many parts `cluster`'s head value names (0: it is whole); `msgspec.DecodeError`
    when it is no heartbeat of `cluster`."""
    return len(decode_wire(head, key=cluster).parts)


def digest(data: bytes) -> str:
    """What a head names a part by: a change of any byte changes it."""
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def encode_room(
    capacity: ClusterCapacity, *, max_bytes: int, last: Heartbeat | None = None
) -> Heartbeat:
    """`capacity` as values of at most `max_bytes` each: one (layout 2) when it fits, else
    parts of `per_part` nodes or placed workloads and their head; a ROOM_TOO_LARGE head beyond
    MAX_PARTS. After `last` in parts, the split stays `last`'s (halved until each part fits),
    and a part whose run holds the same `NodeRoom` objects as `last`'s is not encoded again."""
    per_part = 0 if last is None else last.per_part
    hinted = per_part > 0
    cache = last.cache if last is not None and last.cache is not None else RowCache()
    if not cache.fits(len(capacity.nodes)):
        cache = RowCache()
    if not per_part:
        data = encode(pack(capacity, cache))
        if len(data) <= max_bytes:
            return Heartbeat(head=data, cache=cache)
        per_part = _per_part(len(data), capacity, max_bytes=max_bytes)
    while per_part >= 1:
        runs = [*_runs(capacity.nodes, per_part), *_runs(capacity.placed, per_part)]
        reused = last if last is not None and last.per_part == per_part else None
        parts, digests = _parts(runs, _node_runs(capacity, per_part), reused, cache)
        size = sum(map(len, parts))
        if len(parts) > MAX_PARTS:
            if hinted:  # the room grew past the last split: size it afresh
                return encode_room(capacity, max_bytes=max_bytes, last=_unsplit(cache))
            break
        if hinted and size <= max_bytes * PART_FILL:  # it shrank: one value again
            return encode_room(capacity, max_bytes=max_bytes, last=_unsplit(cache))
        if all(len(p) <= max_bytes for p in parts):
            wire = Wire(cluster=capacity.cluster, layout=LAYOUT_PARTS, parts=digests)
            return Heartbeat(
                head=encode(wire),
                parts=parts,
                per_part=per_part,
                runs=tuple(runs),
                digests=digests,
                cache=cache,
            )
        per_part //= 2
    message = (
        f"its room report of {size} bytes ({len(capacity.nodes)} nodes) does not fit in "
        f"{MAX_PARTS} messages of the {max_bytes} bytes NATS takes in one (max_payload): "
        "raise max_payload on nats-server, or run fewer nodes in this cluster"
    )
    head = too_large_head(capacity, message, max_bytes=max_bytes)
    return Heartbeat(head=head, too_large=message, cache=cache)


def _unsplit(cache: RowCache) -> Heartbeat:
    """A last heartbeat with no split to keep, only what packing learned."""
    return Heartbeat(head=b"", cache=cache)


def _per_part(size: int, capacity: ClusterCapacity, *, max_bytes: int) -> int:
    """The largest power of two of nodes (or placed workloads) whose share of `size` makes a
    part of PART_BYTES, or more when that would take over 40% of MAX_PARTS (rounding down to
    a power of two may double the count), at most PART_FILL of a message. A power of two, so
    that the split stays put as the room moves a little; small parts, so that a node's change
    rewrites (and readers decode) little."""
    items = max(1, len(capacity.nodes) + len(capacity.placed))
    target = min(max_bytes * PART_FILL, max(PART_BYTES, 2.5 * size / MAX_PARTS))
    fits = max(1, int(target * items / size))
    return 1 << (fits.bit_length() - 1)


def _node_runs(capacity: ClusterCapacity, per_part: int) -> range:
    """The indexes of the runs that hold nodes (the rest hold placed workloads)."""
    return range(-(-len(capacity.nodes) // per_part))


def _parts(
    runs: Sequence[tuple[object, ...]],
    node_runs: range,
    last: Heartbeat | None,
    cache: RowCache,
) -> tuple[tuple[bytes, ...], tuple[str, ...]]:
    """Each run's part and digest: `last`'s where its run holds the very same objects."""
    parts: list[bytes] = []
    digests: list[str] = []
    for n, run in enumerate(runs):
        if last is not None and n < len(last.runs) and _same(run, last.runs[n]):
            parts.append(last.parts[n])
            digests.append(last.digests[n])
            continue
        if n in node_runs:
            part = with_rows(Part(), cast(tuple[NodeRoom, ...], run), cache)
        else:
            part = Part(placed=cast(tuple[str, ...], run))
        parts.append(encode(part))
        digests.append(digest(parts[-1]))
    return tuple(parts), tuple(digests)


def _same(run: tuple[object, ...], last: tuple[object, ...]) -> bool:
    return len(run) == len(last) and all(a is b for a, b in zip(run, last, strict=True))


def _runs(items: Sequence[T], size: int) -> Iterator[tuple[T, ...]]:
    for start in range(0, len(items), size):
        yield tuple(items[start : start + size])


_part_decoder: Final = msgspec.json.Decoder(Part)


class Gone(msgspec.Struct, frozen=True):
    """The head of `cluster` was deleted."""

    cluster: str


def refuse_oversized(cluster: str, size: int, max_bytes: int) -> None:
    """`msgspec.ValidationError` naming the cluster, the size and the cap when the heartbeat
    of `cluster` (head and parts: `size` bytes) is larger than a reader takes."""
    if size > max_bytes:
        raise msgspec.ValidationError(
            f"heartbeat of cluster {cluster}: {size} bytes with its parts, over the "
            f"{max_bytes} its readers take (--heartbeat-max-bytes)"
        )


class _Held(msgspec.Struct, frozen=True, gc=False):
    digest: str
    nodes: tuple[NodeRoom, ...]
    placed: tuple[str, ...]
    size: int  # its bytes


class RoomReader:
    """The bucket's values as they come, key by key (a watch, or a snapshot's entries): each
    cluster's room once whole. Holds each part decoded, and a head until its parts are in.

    A head with the bytes of the last one taken whole is the same room (a heartbeat carries no
    time, and a head names its parts by digest): its room is given again, not decoded. Every
    admission replica that follows the bucket hears every beat, up to ten a second per
    cluster while its gang-permit's passes run, most of them saying what the last one said."""

    def __init__(self, *, max_bytes: int = HEARTBEAT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes  # a heartbeat larger, head and parts, is refused
        self._parts: dict[str, _Held] = {}  # by key
        # By cluster: heads of layout 3 not whole yet, as heard and decoded.
        self._waiting: dict[str, tuple[bytes, Wire]] = {}
        self._rooms: dict[str, tuple[bytes, ClusterCapacity]] = {}  # by cluster: last whole

    def heard(self, key: str, value: bytes | None) -> ClusterCapacity | Gone | None:
        """The room `key`'s new value (None: deleted) completes, `Gone` for a deleted head,
        None when nothing is whole yet; `msgspec.DecodeError` for a value that is no
        heartbeat, or a room no cluster has (the last good room stands)."""
        cluster = cluster_of_part(key)
        if cluster is not None:
            if value is None:
                self._parts.pop(key, None)
                return None
            known = self._parts.get(key)
            named_by = digest(value)
            if known is None or known.digest != named_by:  # a part put again as it was: kept
                self._parts[key] = _held(value, named_by)
            head = self._waiting.get(cluster)
            return None if head is None else self._whole(key=cluster, head=head)
        self._waiting.pop(key, None)
        if value is None:
            self._rooms.pop(key, None)
            return Gone(key)
        last = self._rooms.get(key)
        if last is not None and last[0] == value:
            return last[1]
        refuse_oversized(key, len(value), self.max_bytes)
        wire = decode_wire(value, key=key)
        if wire.layout != LAYOUT_PARTS:
            room = vetted_capacity_of(wire, wire.nodes + rooms_of(wire), wire.placed)
            self._rooms[key] = (value, room)
            return room
        return self._whole(key=key, head=(value, wire))

    def waiting(self) -> frozenset[str]:
        """The clusters whose last head waits for parts it names."""
        return frozenset(self._waiting)

    def _whole(self, *, key: str, head: tuple[bytes, Wire]) -> ClusterCapacity | None:
        value, wire = head
        held = [self._parts.get(part_key(key, n)) for n in range(len(wire.parts))]
        parts = [p for p, named in zip(held, wire.parts, strict=True) if p and p.digest == named]
        if len(parts) < len(wire.parts):
            self._waiting[key] = head
            return None  # a part of another heartbeat: the head's own comes (or is read) next
        self._waiting.pop(key, None)
        refuse_oversized(key, len(value) + sum(p.size for p in parts), self.max_bytes)
        nodes = tuple(itertools.chain.from_iterable(p.nodes for p in parts))
        placed = tuple(itertools.chain.from_iterable(p.placed for p in parts))
        room = vetted_capacity_of(wire, nodes, placed)
        self._rooms[key] = (value, room)
        return room


def _held(value: bytes, named_by: str) -> _Held:
    part = _part_decoder.decode(value)
    return _Held(digest=named_by, nodes=rooms_of(part), placed=part.placed, size=len(value))


class Rooms(msgspec.Struct, frozen=True, kw_only=True):
    """One read of the bucket: the rooms whole in it, by cluster; why each bad heartbeat is;
    the clusters whose head met parts of another heartbeat (read again)."""

    whole: dict[str, ClusterCapacity]
    bad: dict[str, str]
    torn: frozenset[str]


def read_rooms(entries: Mapping[str, bytes]) -> Rooms:
    """The rooms in one read of the bucket (key → value)."""
    reader = RoomReader()
    whole: dict[str, ClusterCapacity] = {}
    bad: dict[str, str] = {}
    # Parts first: a head is whole when it comes.
    for key in sorted(entries, key=lambda k: cluster_of_part(k) is None):
        try:
            found = reader.heard(key, entries[key])
        except msgspec.DecodeError as exc:
            bad[cluster_of_part(key) or key] = f"bad heartbeat {key}: {exc}"
            continue
        if isinstance(found, ClusterCapacity):
            whole[key] = found
    for cluster in whole:
        bad.pop(cluster, None)  # a bad part no head names
    return Rooms(whole=whole, bad=bad, torn=reader.waiting() - bad.keys())
