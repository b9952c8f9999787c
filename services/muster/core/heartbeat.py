"""The `MUSTER_CLUSTERS` heartbeat on the wire: a `ClusterCapacity` as compact JSON. Pure.

Nodes of one pool share their labels, taints and allocatable, and an idle node's free room is
its allocatable, so the writer puts each distinct label set, taint set and resource vector once
in a table and each node as a row of indexes (layout 2, docs/events.md). A label whose value
is the node's own name (`kubernetes.io/hostname`) would make every set distinct: the table
keeps its key only, and the reader puts the name back. Lossless: `decode_heartbeat` returns
the `ClusterCapacity` the writer had.

Readers take both layouts (layout 1: `nodes`, each node in full). A heartbeat over what NATS
takes in one message (`max_bytes`, the connection's max_payload) is never sent: the writer
sends instead one without nodes, reason ROOM_TOO_LARGE, naming both sizes, which readers show
as the cluster's reason for taking no dispatched work; its services still answer, so it is not
lost.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Final, Generic, TypeVar

import msgspec

from muster.api.model import Taint
from muster.core.dispatch import ClusterCapacity, NodeRoom

LAYOUT: Final = 2
ROOM_TOO_LARGE: Final = "RoomTooLarge"

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


class Wire(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Both layouts: 1 fills `nodes`; 2 the tables and `rows` (an old reader, which knows
    only `nodes`, sees a cluster without nodes)."""

    cluster: str
    layout: int = 1
    nodes: tuple[NodeRoom, ...] = ()
    label_sets: tuple[LabelSet, ...] = ()
    taint_sets: tuple[tuple[Taint, ...], ...] = ()
    vectors: tuple[dict[str, int], ...] = ()
    rows: tuple[Row, ...] = ()
    placed: tuple[str, ...] = ()
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


def pack(capacity: ClusterCapacity) -> Wire:
    """`capacity` in layout 2."""
    label_sets = _Table(_label_set)
    taint_sets: _Table[tuple[Taint, ...], tuple[Taint, ...]] = _Table(tuple)
    vectors: _Table[tuple[tuple[str, int], ...], dict[str, int]] = _Table(dict)
    rows = []
    for node in capacity.nodes:
        name = node.name
        # The node's own name stands as None in the key: one key for the whole pool.
        labels = tuple((k, None if v == name else v) for k, v in node.labels.items())
        rows.append(
            Row(
                name=name,
                labels=label_sets.add(labels),
                taints=taint_sets.add(node.taints),
                allocatable=vectors.add(tuple(node.allocatable.items())),
                free=vectors.add(tuple(node.free.items())),
            )
        )
    return Wire(
        cluster=capacity.cluster,
        layout=LAYOUT,
        label_sets=tuple(label_sets.values),
        taint_sets=tuple(taint_sets.values),
        vectors=tuple(vectors.values),
        rows=tuple(rows),
        placed=capacity.placed,
        unreachable=capacity.unreachable,
        reason=capacity.reason,
    )


def _label_set(key: tuple[tuple[str, str | None], ...]) -> LabelSet:
    labels = {k: v for k, v in key if v is not None}
    return LabelSet(labels=labels, named=tuple(k for k, v in key if v is None))


def encode_heartbeat(capacity: ClusterCapacity, *, max_bytes: int) -> tuple[bytes, str]:
    """The heartbeat to put, and why it is not `capacity` ("" when it is): `capacity` in
    layout 2, or, over `max_bytes`, the one saying so (with the placed workloads if they fit,
    so dispatch holds still end)."""
    data = _encoder.encode(pack(capacity))
    if len(data) <= max_bytes:
        return data, ""
    message = (
        f"its room report of {len(data)} bytes ({len(capacity.nodes)} nodes) is over the "
        f"{max_bytes} bytes NATS takes in one message (max_payload): raise max_payload on "
        "nats-server, or run fewer nodes in this cluster"
    )
    too_large = ClusterCapacity(
        cluster=capacity.cluster,
        placed=capacity.placed,
        unreachable=message,
        reason=ROOM_TOO_LARGE,
    )
    data = _encoder.encode(too_large)
    if len(data) > max_bytes:
        data = _encoder.encode(msgspec.structs.replace(too_large, placed=()))
    return data, message


def reached(capacity: ClusterCapacity) -> bool:
    """Whether the cluster's services reach it: any heartbeat but one saying they cannot (a
    ROOM_TOO_LARGE one comes from services that read the whole cluster)."""
    return not capacity.unreachable or capacity.reason == ROOM_TOO_LARGE


def decode_heartbeat(data: bytes) -> ClusterCapacity:
    """A heartbeat of either layout as the dispatcher sees it; `msgspec.ValidationError`
    (a `DecodeError`) naming the row and table when an index points nowhere."""
    wire = _decoder.decode(data)
    nodes = wire.nodes + tuple(_unpack(wire, i, row) for i, row in enumerate(wire.rows))
    return ClusterCapacity(
        cluster=wire.cluster,
        nodes=nodes,
        placed=wire.placed,
        unreachable=wire.unreachable,
        reason=wire.reason,
    )


def _unpack(wire: Wire, i: int, row: Row) -> NodeRoom:
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
