"""The `MUSTER_CLUSTERS` heartbeat on the wire: a `ClusterCapacity` as compact JSON. Pure.

Nodes of one pool share their labels, taints and allocatable, and an idle node's free room is
its allocatable, so the writer puts each distinct label set, taint set and resource vector once
in a table and each node as a row of indexes (layout 2, docs/events.md). A label whose value
is the node's own name (`kubernetes.io/hostname`) would make every set distinct: the table
keeps its key only, and the reader puts the name back. Lossless: `decode_heartbeat` returns
the `ClusterCapacity` the writer had.

Readers take both layouts (layout 1: `nodes`, each node in full). A room over what NATS takes
in one message (the connection's max_payload) goes in parts (layout 3,
`muster.core.heartbeat_parts`, which writes every layout); `too_large` is the heartbeat of a
room beyond even that: no nodes, reason ROOM_TOO_LARGE, naming the sizes, which readers show as
the cluster's reason for taking no dispatched work; its services still answer, so it is not
lost.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Final, Generic, TypeVar

import msgspec

from muster.api.model import Taint
from muster.core.dispatch import ClusterCapacity, NodeRoom

LAYOUT: Final = 2
ROOM_TOO_LARGE: Final = "RoomTooLarge"
# What readers that show a refused heartbeat (bad, or an impossible room) say, with why.
HEARTBEAT_REFUSED: Final = "HeartbeatRefused"
# Past this (milli-units: 4.6e15 cores, 4.6 PB of memory) no node's room is real.
MAX_AMOUNT: Final = 1 << 62

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class LabelSet(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """Labels shared by nodes; `named`: the keys whose value is each node's own name."""

    labels: dict[str, str]
    named: tuple[str, ...] = ()


class Row(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One node: its name, and indexes into the tables."""

    name: str
    labels: int
    taints: int
    allocatable: int
    free: int


class Tables(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Nodes as rows of indexes into tables (layout 2), and placed workloads: a whole
    heartbeat's (`Wire`) or one part's (layout 3, `muster.core.heartbeat_parts`)."""

    label_sets: tuple[LabelSet, ...] = ()
    taint_sets: tuple[tuple[Taint, ...], ...] = ()
    vectors: tuple[dict[str, int], ...] = ()
    rows: tuple[Row, ...] = ()
    placed: tuple[str, ...] = ()


class Wire(Tables, frozen=True, kw_only=True, gc=False):
    """Every layout's `<cluster>` value: 1 fills `nodes`; 2 the tables and `rows` (an old
    reader, which knows only `nodes`, sees a cluster without nodes); 3 `parts`, the digest of
    each part holding the tables (a reader before layout 3 sees a cluster without nodes)."""

    cluster: str
    layout: int = 1
    nodes: tuple[NodeRoom, ...] = ()
    parts: tuple[str, ...] = ()
    unreachable: str = ""
    reason: str = ""


_decoder: Final = msgspec.json.Decoder(Wire)
_encoder: Final = msgspec.json.Encoder()


class _Table(Generic[K, T]):
    """Distinct values in order of first use, each by its index."""

    def __init__(self, make: Callable[[K], T]) -> None:
        self.make = make  # a new key's value
        self.index: dict[K, int] = {}
        self.values: list[T] = []

    def add(self, key: K) -> int:
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(self.values)
            self.values.append(self.make(key))
        return found


LabelKey = tuple[tuple[str, str | None], ...]  # None: the node's own name
VectorKey = tuple[tuple[str, int], ...]


def _same(key: K) -> K:
    return key


class RowCache:
    """What packing learned of each node's room, kept by the writer from one heartbeat to the
    next: a node whose `NodeRoom` is the very same object as last time is not read again, and
    its table keys are compared as small numbers. Changes no byte of what is packed."""

    def __init__(self) -> None:
        self._nodes: dict[int, tuple[NodeRoom, tuple[int, int, int, int]]] = {}  # by id()
        self.labels: _Table[LabelKey, LabelKey] = _Table(_same)  # each key by its number
        self.taints: _Table[tuple[Taint, ...], tuple[Taint, ...]] = _Table(_same)
        self.vectors: _Table[VectorKey, VectorKey] = _Table(_same)

    def ids_of(self, node: NodeRoom) -> tuple[int, int, int, int]:
        """The numbers of `node`'s label set, taint set, allocatable and free vectors."""
        found = self._nodes.get(id(node))
        if found is not None and found[0] is node:
            return found[1]
        name = node.name
        # The node's own name stands as None in the key: one key for the whole pool.
        labels = tuple((k, None if v == name else v) for k, v in node.labels.items())
        ids = (
            self.labels.add(labels),
            self.taints.add(node.taints),
            self.vectors.add(tuple(node.allocatable.items())),
            self.vectors.add(tuple(node.free.items())),
        )
        self._nodes[id(node)] = (node, ids)
        return ids

    def fits(self, nodes: int) -> bool:
        """Whether it holds little more than `nodes` nodes need (else start a new one: rooms
        that changed leave entries behind)."""
        held = max(len(self._nodes), len(self.vectors.values), len(self.labels.values))
        return held <= 2 * nodes + 1024


def pack(capacity: ClusterCapacity, cache: RowCache | None = None) -> Wire:
    """`capacity` in layout 2."""
    head = Wire(
        cluster=capacity.cluster,
        layout=LAYOUT,
        placed=capacity.placed,
        unreachable=capacity.unreachable,
        reason=capacity.reason,
    )
    return with_rows(head, capacity.nodes, cache)


W = TypeVar("W", bound=Tables)


def with_rows(base: W, nodes: Sequence[NodeRoom], cache: RowCache | None = None) -> W:
    """`base` with `nodes` as rows, and the tables they use (in order of first use)."""
    known = cache or RowCache()
    label_sets: _Table[int, LabelSet] = _Table(lambda i: _label_set(known.labels.values[i]))
    taint_sets: _Table[int, tuple[Taint, ...]] = _Table(lambda i: known.taints.values[i])
    vectors: _Table[int, dict[str, int]] = _Table(lambda i: dict(known.vectors.values[i]))
    rows = []
    for node in nodes:
        labels, taints, allocatable, free = known.ids_of(node)
        rows.append(
            Row(
                name=node.name,
                labels=label_sets.add(labels),
                taints=taint_sets.add(taints),
                allocatable=vectors.add(allocatable),
                free=vectors.add(free),
            )
        )
    return msgspec.structs.replace(
        base,
        label_sets=tuple(label_sets.values),
        taint_sets=tuple(taint_sets.values),
        vectors=tuple(vectors.values),
        rows=tuple(rows),
    )


def _label_set(key: LabelKey) -> LabelSet:
    labels = {k: v for k, v in key if v is not None}
    return LabelSet(labels=labels, named=tuple(k for k, v in key if v is None))


def encode(wire: Tables) -> bytes:
    """`wire` as the bytes put in the bucket."""
    return _encoder.encode(wire)


def too_large_head(capacity: ClusterCapacity, message: str, *, max_bytes: int) -> bytes:
    """The heartbeat saying why it reports no room (`message`, reason ROOM_TOO_LARGE), with
    the placed workloads if they fit in `max_bytes`, so dispatch holds still end."""
    said = ClusterCapacity(
        cluster=capacity.cluster,
        placed=capacity.placed,
        unreachable=message,
        reason=ROOM_TOO_LARGE,
    )
    data = _encoder.encode(said)
    if len(data) > max_bytes:
        data = _encoder.encode(msgspec.structs.replace(said, placed=()))
    return data


def reached(capacity: ClusterCapacity) -> bool:
    """Whether the cluster's services reach it: any heartbeat but one saying they cannot (a
    ROOM_TOO_LARGE one comes from services that read the whole cluster)."""
    return not capacity.unreachable or capacity.reason == ROOM_TOO_LARGE


def decode_wire(data: bytes, *, key: str) -> Wire:
    """The value at `key` (`<cluster>`) of any layout, as written; `msgspec.DecodeError` when
    it is not, or when it names another cluster than its key's.

    The key says whose room it is: NATS lets each cluster's gang-permit write its own keys
    only, while the body is whatever that writer put. A worker that named another cluster in
    its body would keep a silent cluster alive, give it room it does not have, and end the
    holds on what was dispatched there."""
    wire = _decoder.decode(data)
    if wire.cluster != key:
        raise msgspec.ValidationError(
            f"$.cluster: {_shown(wire.cluster)} is not {_shown(key)}, the cluster of its key "
            "(a cluster reports its own room only)"
        )
    return wire


def _shown(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:80] + "...")


def decode_heartbeat(data: bytes, *, key: str) -> ClusterCapacity:
    """A heartbeat of layout 1 or 2, put at `key`, as the dispatcher sees it (the head of
    layout 3 without its parts: a cluster without nodes); `msgspec.ValidationError` (a
    `DecodeError`) naming the row and table when an index points nowhere, or the field when
    it names another cluster than its key's, or the node whose room is impossible."""
    wire = decode_wire(data, key=key)
    return vetted_capacity_of(wire, wire.nodes + rooms_of(wire), wire.placed)


def capacity_of(
    wire: Wire, nodes: tuple[NodeRoom, ...], placed: tuple[str, ...]
) -> ClusterCapacity:
    """The cluster `wire` is the head of, with `nodes` and `placed` (read from it or its
    parts), as reported: what dispatch reads is `vetted_capacity_of`."""
    return ClusterCapacity(
        cluster=wire.cluster,
        nodes=nodes,
        placed=placed,
        unreachable=wire.unreachable,
        reason=wire.reason,
    )


def vetted_capacity_of(
    wire: Wire, nodes: tuple[NodeRoom, ...], placed: tuple[str, ...]
) -> ClusterCapacity:
    """`capacity_of`, or `msgspec.ValidationError` naming the node when the room is one no
    cluster has (`refuse_impossible`): what dispatch and cluster status read."""
    refuse_impossible(wire.cluster, nodes)
    return capacity_of(wire, nodes, placed)


def refuse_impossible(cluster: str, nodes: Sequence[NodeRoom]) -> None:
    """`msgspec.ValidationError` naming the cluster and node when `nodes` claim a room no
    cluster has: a node's free room over its allocatable, an amount past MAX_AMOUNT, or a
    node listed twice. A worker's gang-permit writes its own key only, but best-fit dispatch
    believes what it says: free over allocatable is a share of free room over 100%, which wins
    every dispatch. Free room under 0 is a node over-committed, and stands."""
    seen: set[str] = set()
    vetted: set[tuple[int, int]] = set()  # nodes of one pool share their vectors: each once
    for node in nodes:
        if node.name in seen:
            raise msgspec.ValidationError(
                f"node {_shown(node.name)} of cluster {_shown(cluster)} is listed twice "
                "(its room would count twice)"
            )
        seen.add(node.name)
        vectors = (id(node.allocatable), id(node.free))
        if vectors in vetted:
            continue
        problem = _impossible(node)
        if problem:
            raise msgspec.ValidationError(
                f"node {_shown(node.name)} of cluster {_shown(cluster)}: {problem} "
                "(a room no node has: the heartbeat is refused)"
            )
        vetted.add(vectors)


def _impossible(node: NodeRoom) -> str:
    for resource, amount in node.allocatable.items():
        if not 0 <= amount <= MAX_AMOUNT:
            return f"allocatable {resource} {amount} is not 0 to {MAX_AMOUNT}"
    for resource, amount in node.free.items():
        if amount > (most := node.allocatable.get(resource, 0)):
            return f"free {resource} {amount} is more than its allocatable {most}"
    return ""


def rooms_of(tables: Tables) -> tuple[NodeRoom, ...]:
    """The nodes of `tables`' rows; `msgspec.ValidationError` when an index points nowhere."""
    return tuple(_unpack(tables, i, row) for i, row in enumerate(tables.rows))


def _unpack(wire: Tables, i: int, row: Row) -> NodeRoom:
    labels = _at(wire.label_sets, row.labels, f"$.rows[{i}][1]", "label_sets")
    return NodeRoom(
        name=row.name,
        labels=_labels(labels, row.name),
        taints=_at(wire.taint_sets, row.taints, f"$.rows[{i}][2]", "taint_sets"),
        allocatable=_at(wire.vectors, row.allocatable, f"$.rows[{i}][3]", "vectors"),
        free=_at(wire.vectors, row.free, f"$.rows[{i}][4]", "vectors"),
    )


def _labels(found: LabelSet, name: str) -> Mapping[str, str]:
    if not found.named:
        return found.labels  # shared by the nodes of the set: read-only, as every Resources
    return {**found.labels, **dict.fromkeys(found.named, name)}


def _at(table: tuple[T, ...], index: int, path: str, name: str) -> T:
    if not 0 <= index < len(table):
        raise msgspec.ValidationError(f"{path}: {name} has no entry {index} (of {len(table)})")
    return table[index]
