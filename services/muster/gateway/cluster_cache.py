"""The gateway's rooms of `MUSTER_CLUSTERS`, kept from one Visibility.Clusters call to the next.

Each call reads the heads only (key `<cluster>`: one small value per cluster, with its age) and
decodes what changed since the call before: a head whose bytes are the ones held keeps its
room (nodes in name order, totals); a head in parts (layout 3, `muster.core.heartbeat_parts`)
reads and decodes only the parts it names by a digest not held. A 50 000-node cluster whose
heartbeat changed one part costs that part; an idle one, its head's bytes compared.

Read when asked rather than followed: a gateway nobody asks spends nothing while large
clusters beat, and each answer is the bucket at the call (ages from the server's clock).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from muster.bus.kv import Bucket, Entry
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import (
    HEARTBEAT_REFUSED,
    Wire,
    capacity_of,
    decode_wire,
    refuse_impossible,
    rooms_of,
    vetted_capacity_of,
)
from muster.core.heartbeat_parts import (
    HEARTBEAT_MAX_BYTES,
    LAYOUT_PARTS,
    Part,
    digest,
    part_key,
    part_of,
    parts_pattern,
    refuse_oversized,
)

log = logging.getLogger(__name__)

READS: Final = 3  # reads of the bucket before a room whose parts keep changing is shown empty
HEADS: Final = "*"  # a cluster id has no dot: one token is a head, never a part
GETS: Final = 8  # parts of one cluster read key by key; more in one pass over its parts

_part_decoder: Final = msgspec.json.Decoder(Part)


class ClusterRoom(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A cluster's room as the views read it: its nodes in name order, and their totals."""

    capacity: ClusterCapacity
    nodes: tuple[NodeRoom, ...]  # by name
    names: tuple[str, ...]  # each node's name, in the same order: where a page starts
    allocatable: Mapping[str, int]
    free: Mapping[str, int]
    least_bytes: int = 0  # `view_bytes` of its nodes: an answer with them all is no smaller


Reported = Mapping[str, tuple[ClusterRoom, float]]  # cluster -> its room, its heartbeat's age


def cluster_room(
    capacity: ClusterCapacity,
    totals: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
    *,
    ordered: tuple[str, ...] | None = None,
    least_bytes: int | None = None,
) -> ClusterRoom:
    """`capacity` as the views read it; `totals` (allocatable, free) and `least_bytes` when
    already summed, `ordered` its nodes' names when they are known to be in order."""
    nodes, names = capacity.nodes, ordered
    if names is None:
        listed = [node.name for node in nodes]
        names = tuple(sorted(listed))  # a writer's nodes come in name order: one pass, in C
        if list(names) != listed:
            nodes = tuple(sorted(nodes, key=_name))
    allocatable, free = totals or _totals(nodes)
    return ClusterRoom(
        capacity=capacity,
        nodes=nodes,
        names=names,
        allocatable=allocatable,
        free=free,
        least_bytes=view_bytes(nodes) if least_bytes is None else least_bytes,
    )


def _name(node: NodeRoom) -> str:
    return node.name


def view_bytes(nodes: Iterable[NodeRoom]) -> int:
    """A lower bound on the bytes of `nodes` as Visibility.Clusters NodeViews (no pods): each
    field's tag and length, its name, label keys and values, and resource names, as one byte
    each at least. Summed when a heartbeat is decoded, so a call asking for every node of a
    room too large for one answer is refused before any view is built."""
    return sum(
        4
        + len(node.name)
        + sum(len(k) + len(v) + 4 for k, v in node.labels.items())
        + sum(len(r) + 5 for r in node.allocatable)
        + sum(len(r) + 5 for r in node.free)
        for node in nodes
    )


def _totals(nodes: Iterable[NodeRoom]) -> tuple[dict[str, int], dict[str, int]]:
    allocatable: dict[str, int] = {}
    free: dict[str, int] = {}
    for node in nodes:
        for resource, value in node.allocatable.items():
            allocatable[resource] = allocatable.get(resource, 0) + value
        for resource, value in node.free.items():
            free[resource] = free.get(resource, 0) + value
    return allocatable, free


def _added(sums: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for one in sums:
        for resource, value in one.items():
            out[resource] = out.get(resource, 0) + value
    return out


class _Held(msgspec.Struct, frozen=True, gc=False):
    """One part as decoded, with its nodes' names and totals; `bad`: why it is no part."""

    digest: str
    nodes: tuple[NodeRoom, ...] = ()
    names: tuple[str, ...] = ()
    ordered: bool = True  # its nodes are in name order
    placed: tuple[str, ...] = ()
    allocatable: Mapping[str, int] = msgspec.field(default_factory=dict)
    free: Mapping[str, int] = msgspec.field(default_factory=dict)
    least_bytes: int = 0
    bad: str = ""
    size: int = 0  # its bytes


def _held(key: str, value: bytes) -> _Held:
    try:
        part = _part_decoder.decode(value)
        nodes = rooms_of(part)
    except msgspec.DecodeError as exc:
        return _Held(digest(value), bad=f"bad heartbeat {key}: {exc}", size=len(value))
    allocatable, free = _totals(nodes)
    names = tuple(node.name for node in nodes)
    ordered = list(names) == sorted(names)
    return _Held(
        digest(value),
        nodes,
        names,
        ordered,
        part.placed,
        allocatable,
        free,
        view_bytes(nodes),
        size=len(value),
    )


class HeldRooms:
    """Each cluster's room as last read, by its head's bytes, and each part decoded, by key and
    digest: what lets a read decode only what changed. Pure: the caller reads the bucket."""

    def __init__(self, *, max_bytes: int = HEARTBEAT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes  # a heartbeat larger, head and parts, is shown refused
        self._heads: dict[str, tuple[bytes, ClusterRoom, int]] = {}  # room, parts named
        self._parts: dict[str, _Held] = {}  # by key
        self._wires: dict[str, tuple[bytes, Wire]] = {}  # heads `missing` decoded, for `room`

    def missing(self, cluster: str, head: bytes) -> list[str]:
        """The part keys `head` names by a digest not held (none for a head already held)."""
        held = self._heads.get(cluster)
        if held is not None and held[0] == head:
            return []
        try:
            wire = decode_wire(head, key=cluster)
        except msgspec.DecodeError:
            return []  # `room` says why
        self._wires[cluster] = (head, wire)
        named = wire.parts
        return [
            key
            for n, want in enumerate(named)
            if (found := self._parts.get(key := part_key(cluster, n))) is None
            or found.digest != want
        ]

    def hold_part(self, key: str, value: bytes | None) -> None:
        """Take part `key`'s value as read (None: deleted)."""
        if value is None:
            self._parts.pop(key, None)
        elif (known := self._parts.get(key)) is None or known.digest != digest(value):
            self._parts[key] = _held(key, value)

    def room(self, cluster: str, head: bytes) -> ClusterRoom | None:
        """`cluster`'s room by its head `head`; None when a part it names is not held (a part
        of another heartbeat was read: read again). A bad heartbeat's room is empty."""
        held = self._heads.get(cluster)
        if held is not None and held[0] == head:
            return held[1]
        try:
            refuse_oversized(cluster, len(head), self.max_bytes)
            wire = self._wire(cluster, head)
            if wire.layout != LAYOUT_PARTS:
                nodes = wire.nodes + rooms_of(wire)
                room = cluster_room(vetted_capacity_of(wire, nodes, wire.placed))
                self._heads[cluster] = (head, room, 0)
                return room
        except msgspec.DecodeError as exc:
            return self._bad(cluster, head, f"bad heartbeat {cluster}: {exc}", named=0)
        parts = [self._parts.get(part_key(cluster, n)) for n in range(len(wire.parts))]
        if any(p is None or p.digest != want for p, want in zip(parts, wire.parts, strict=True)):
            return None
        whole = [p for p in parts if p is not None]
        if bad := next((p.bad for p in whole if p.bad), ""):
            return self._bad(cluster, head, bad, named=len(whole))
        nodes = tuple(itertools.chain.from_iterable(p.nodes for p in whole))
        try:
            refuse_oversized(cluster, len(head) + sum(p.size for p in whole), self.max_bytes)
            refuse_impossible(cluster, nodes)  # as dispatch does: a lying room is not shown
        except msgspec.DecodeError as exc:
            return self._bad(cluster, head, f"bad heartbeat {cluster}: {exc}", named=len(whole))
        capacity = capacity_of(
            wire, nodes, tuple(itertools.chain.from_iterable(p.placed for p in whole))
        )
        totals = (_added(p.allocatable for p in whole), _added(p.free for p in whole))
        least = sum(p.least_bytes for p in whole)
        room = cluster_room(capacity, totals, ordered=_ordered(whole), least_bytes=least)
        self._heads[cluster] = (head, room, len(whole))
        return room

    def _wire(self, cluster: str, head: bytes) -> Wire:
        found = self._wires.pop(cluster, None)
        if found is not None and found[0] == head:
            return found[1]
        return decode_wire(head, key=cluster)

    def _bad(self, cluster: str, head: bytes, why: str, *, named: int) -> ClusterRoom:
        log.warning("%s (its room is shown empty)", why)  # once per head: it is held
        refused = ClusterCapacity(cluster=cluster, unreachable=why, reason=HEARTBEAT_REFUSED)
        room = cluster_room(refused)
        self._heads[cluster] = (head, room, named)
        return room

    def keep(self, clusters: Iterable[str]) -> None:
        """Forget every cluster but `clusters`, and parts past what their heads name."""
        kept = set(clusters)
        self._wires.clear()
        self._heads = {c: held for c, held in self._heads.items() if c in kept}
        named = {c: held[2] for c, held in self._heads.items()}
        self._parts = {
            key: part
            for key, part in self._parts.items()
            if (found := part_of(key)) is not None and found[1] < named.get(found[0], 0)
        }


def _ordered(parts: list[_Held]) -> tuple[str, ...] | None:
    """The parts' node names, when in order within each part and from one to the next (as a
    writer puts them): the room need not be sorted again."""
    runs = [p.names for p in parts if p.names]
    if all(p.ordered for p in parts) and all(a[-1] < b[0] for a, b in itertools.pairwise(runs)):
        return tuple(itertools.chain.from_iterable(runs))
    return None


class ClusterRooms:
    """The gateway's cache of rooms: one read at a time, each reusing what the last decoded."""

    def __init__(self, *, max_bytes: int = HEARTBEAT_MAX_BYTES) -> None:
        self._held = HeldRooms(max_bytes=max_bytes)
        self._lock = asyncio.Lock()

    async def read(self, kv: Bucket) -> dict[str, tuple[ClusterRoom, float]]:
        """cluster -> (its room as last reported, its heartbeat's age in seconds); the room of
        a bad heartbeat, or of one whose parts kept changing over READS reads, is empty.
        `Unavailable` when NATS fails."""
        async with self._lock:  # a second call waits, then finds the first one's work held
            return await _read(kv, self._held)


async def _read(kv: Bucket, held: HeldRooms) -> dict[str, tuple[ClusterRoom, float]]:
    for _ in range(READS):
        heads = await kv.snapshot(HEADS)
        now = time.time()
        wanted = [key for c, e in heads.items() for key in held.missing(c, e.value or b"")]
        await _read_parts(kv, held, wanted)
        rooms = {c: held.room(c, e.value or b"") for c, e in heads.items()}
        if None not in rooms.values():
            break  # else parts of the next heartbeat came between a head and its own
    held.keep(heads)
    return {
        c: (room or cluster_room(ClusterCapacity(cluster=c)), _age(heads[c], now))
        for c, room in rooms.items()
    }


def _age(entry: Entry, now: float) -> float:
    return max(0.0, now - entry.created) if entry.created else 0.0


async def _read_parts(kv: Bucket, held: HeldRooms, keys: list[str]) -> None:
    """Read `keys` into `held`: key by key for a few of a cluster's, else in one pass over
    its parts (a cluster not held yet, or whose every node changed)."""
    by_cluster: dict[str, list[str]] = {}
    for key in keys:
        part = part_of(key)
        if part is not None:
            by_cluster.setdefault(part[0], []).append(key)
    few = [key for wanted in by_cluster.values() if len(wanted) <= GETS for key in wanted]
    entries = await asyncio.gather(*(kv.get(key) for key in few))
    for key, entry in zip(few, entries, strict=True):
        held.hold_part(key, None if entry is None else entry.value)
    for cluster, wanted in by_cluster.items():
        if len(wanted) > GETS:
            found = await kv.snapshot(parts_pattern(cluster))
            for key in wanted:
                held.hold_part(key, found[key].value if key in found else None)
