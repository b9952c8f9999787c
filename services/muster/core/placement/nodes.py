"""The node table: every node's static facts and its allocatable and used room, as numpy arrays.

Rows are nodes, columns resources (one per name seen, `pods` first; a new name adds a column).
A removed node's row is reused by the next node added, so row numbers say nothing about order:
`rank` (the nodes sorted by name) breaks ties. Owned by `PlacementState`; `fit`, `counting`
and `nominated` read it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from muster.api.model import Taint
from muster.core.placement.model import DEFAULT_MAX_PODS, PODS, NodeInfo, NodeName

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]

MISSING = -1  # label code of a node without the label


class LabelColumn:
    """One label key over every row: an integer code per value (`MISSING` when absent)."""

    __slots__ = ("codes", "values", "vocab")

    def __init__(self, capacity: int) -> None:
        self.codes = np.full(capacity, MISSING, dtype=np.int32)
        self.vocab: dict[str, int] = {}
        self.values: list[str] = []

    def code(self, value: str | None) -> int:
        if value is None:
            return MISSING
        code = self.vocab.get(value)
        if code is None:
            code = self.vocab[value] = len(self.values)
            self.values.append(value)
        return code


class NodeTable:
    """Nodes × resources matrices of allocatable and used room, plus each node's static facts.

    `used` is everything that holds room on the node: bound pods and pods permitted but not yet
    bound (the scheduler adds and removes them). Use recorded for a node the table does not
    know (removed, or not seen yet) is kept by name and comes back with the node.
    `version` changes whenever a static fact (labels, taints, readiness, the set of nodes)
    does, so masks computed from them can be cached; `room_version` whenever any room does,
    and `changed_rows` says which rows, so what is derived from the room (`fit.RoomCache`)
    follows it row by row instead of over every node. `room` (allocatable minus used) is kept
    up to date as use changes: a pass reads it without building it (`live_free`).
    """

    def __init__(self) -> None:
        self.columns: dict[str, int] = {PODS: 0}
        self.resource_names: list[str] = [PODS]
        self.alloc: Ints = np.zeros((0, 1), dtype=np.int64, order="F")
        self.used: Ints = np.zeros((0, 1), dtype=np.int64, order="F")
        self.room: Ints = np.zeros((0, 1), dtype=np.int64, order="F")  # alloc - used
        self._live: Ints = _read_only(self.room)
        self.alive: Bools = np.zeros(0, dtype=np.bool_)
        self.ready: Bools = np.zeros(0, dtype=np.bool_)
        self.unschedulable: Bools = np.zeros(0, dtype=np.bool_)
        self.taint_class: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self._taint_ids: dict[tuple[Taint, ...], int] = {(): 0}
        self.infos: list[NodeInfo | None] = []
        self.index: dict[NodeName, int] = {}
        self._free_rows: list[int] = []
        self._absent_used: dict[NodeName, dict[str, int]] = {}
        self._labels: dict[str, LabelColumn] = {}
        self.version = 0
        self.room_version = 0
        self._changes: list[Ints] = []  # rows whose room changed, one entry per room_version
        self._changes_from = 0  # the room_version before the first entry
        self._rank: Ints | None = None
        self._inv_alloc: Floats | None = None

    # --- shape -----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """How many nodes the table holds."""
        return len(self.index)

    @property
    def capacity(self) -> int:
        """How many rows the arrays have (dead rows included)."""
        return len(self.infos)

    def column(self, resource: str) -> int:
        """The column of `resource`, added (zero everywhere) if new."""
        col = self.columns.get(resource)
        if col is None:
            col = self.columns[resource] = len(self.resource_names)
            self.resource_names.append(resource)
            self.alloc = _with_column(self.alloc)
            self.used = _with_column(self.used)
            self._set_room(_with_column(self.room))
            self._inv_alloc = None
        return col

    def _grow(self) -> None:
        old = self.capacity
        new = max(8, 2 * old)
        self.alloc = _with_rows(self.alloc, new)
        self.used = _with_rows(self.used, new)
        self._set_room(_with_rows(self.room, new))
        self.alive = np.concatenate([self.alive, np.zeros(new - old, dtype=np.bool_)])
        self.ready = np.concatenate([self.ready, np.zeros(new - old, dtype=np.bool_)])
        self.unschedulable = np.concatenate(
            [self.unschedulable, np.zeros(new - old, dtype=np.bool_)]
        )
        self.taint_class = np.concatenate([self.taint_class, np.zeros(new - old, dtype=np.int32)])
        for label in self._labels.values():
            label.codes = np.concatenate([label.codes, np.full(new - old, MISSING, dtype=np.int32)])
        self.infos.extend([None] * (new - old))
        # Reused lowest first, so a table filled from empty keeps rows in insertion order.
        self._free_rows = sorted([*self._free_rows, *range(old, new)], reverse=True)

    # --- facts -----------------------------------------------------------------------------

    def upsert(self, node: NodeInfo) -> bool:
        """Add or replace `node`; False if nothing changed."""
        row = self.index.get(node.name)
        if row is not None and self.infos[row] == node:
            return False
        if row is None:
            if not self._free_rows:
                self._grow()
            row = self._free_rows.pop()
            self.index[node.name] = row
            self.alive[row] = True
            self._rank = None
            absent = self._absent_used.pop(node.name, None)
            if absent:
                for resource, amount in absent.items():
                    col = self.column(resource)  # first: a new column replaces the arrays
                    self.used[row, col] = amount
        self.infos[row] = node
        allocatable = {PODS: DEFAULT_MAX_PODS, **node.allocatable}
        cols = [(self.column(resource), amount) for resource, amount in allocatable.items()]
        self.alloc[row, :] = 0
        for col, amount in cols:
            self.alloc[row, col] = amount
        self.room[row] = self.alloc[row] - self.used[row]
        self.ready[row] = node.ready
        self.unschedulable[row] = node.unschedulable
        self.taint_class[row] = self._taint_id(node.taints)
        for key, label in self._labels.items():
            label.codes[row] = label.code(node.labels.get(key))
        self.version += 1
        self._room_changed(np.array([row]))
        self._inv_alloc = None
        return True

    def remove(self, name: NodeName) -> bool:
        """Forget node `name`, keeping its recorded use by name; False if unknown."""
        row = self.index.pop(name, None)
        if row is None:
            return False
        used = {
            resource: int(self.used[row, col])
            for resource, col in self.columns.items()
            if self.used[row, col]
        }
        if used:
            self._absent_used[name] = used
        self.infos[row] = None
        self.alloc[row, :] = 0
        self.used[row, :] = 0
        self.room[row, :] = 0
        self.alive[row] = False
        self.ready[row] = False
        self.unschedulable[row] = False
        self.taint_class[row] = 0
        for label in self._labels.values():
            label.codes[row] = MISSING
        self._free_rows.append(row)
        self._rank = None
        self.version += 1
        self._room_changed(np.array([row]))
        self._inv_alloc = None
        return True

    def _taint_id(self, taints: tuple[Taint, ...]) -> int:
        found = self._taint_ids.get(taints)
        if found is None:
            found = self._taint_ids[taints] = len(self.taint_sets)
            self.taint_sets.append(taints)
        return found

    def add_use(self, node: NodeName, demand: Ints, *, times: int = 1) -> None:
        """Add `times` × `demand` (one value per column, shorter is zero-padded) to `node`."""
        row = self.index.get(node)
        if row is not None:
            self.used[row, : len(demand)] += demand * times
            self.room[row, : len(demand)] -= demand * times
            self._room_changed(np.array([row]))
            return
        absent = self._absent_used.setdefault(node, {})
        for col, amount in enumerate(demand.tolist()):
            if amount:
                resource = self.resource_names[col]
                absent[resource] = absent.get(resource, 0) + amount * times
        if not any(absent.values()):
            del self._absent_used[node]

    def add_use_rows(self, rows: Ints, counts: Ints, demand: Ints) -> None:
        """Add `counts[i]` × `demand` to each of `rows` (distinct rows), in one step."""
        if len(rows) == 1:  # a one-pod gang's, most often: a row's slice, not a fancy index
            row, times = int(rows[0]), int(counts[0])
            self.used[row, : len(demand)] += demand * times
            self.room[row, : len(demand)] -= demand * times
            self._room_changed(rows)
            return
        taken = np.outer(counts, demand)
        self.used[rows, : len(demand)] += taken
        self.room[rows, : len(demand)] -= taken
        self._room_changed(rows)

    def _room_changed(self, rows: Ints) -> None:
        self.room_version += 1
        self._changes.append(rows)
        if len(self._changes) > 2 * CHANGES_KEPT:  # older readers start over from `room`
            del self._changes[:CHANGES_KEPT]
            self._changes_from += CHANGES_KEPT

    def changed_rows(self, since: int) -> Ints | None:
        """The rows whose room changed after `room_version` `since` (repeats possible); None
        when that is too long ago to say."""
        start = since - self._changes_from
        if start < 0:
            return None
        changes = self._changes[start:]
        if len(changes) <= 1:  # the common case: one change since the reader last looked
            return changes[0] if changes else _NO_ROWS
        return np.concatenate(changes)

    def _set_room(self, room: Ints) -> None:
        self.room = room
        self._live = _read_only(room)

    # --- derived views ---------------------------------------------------------------------

    def name(self, row: int) -> NodeName:
        info = self.infos[row]
        assert info is not None, f"row {row} holds no node"
        return info.name

    @property
    def rank(self) -> Ints:
        """Each row's position among the nodes sorted by name (dead rows last)."""
        if self._rank is None:
            rank = np.full(self.capacity, self.capacity, dtype=np.int64)
            for position, name in enumerate(sorted(self.index)):
                rank[self.index[name]] = position
            self._rank = rank
        return self._rank

    @property
    def inv_alloc(self) -> Floats:
        """1 / allocatable per row and column (0 where nothing is allocatable), for scores."""
        if self._inv_alloc is None:
            alloc = self.alloc.astype(np.float64)
            with np.errstate(divide="ignore"):
                inverse = np.where(alloc > 0, 1.0 / alloc, 0.0)
            self._inv_alloc = np.asfortranarray(inverse)
        return self._inv_alloc

    def label(self, key: str) -> LabelColumn:
        """Label `key` over every row, built on first use and kept up to date after."""
        label = self._labels.get(key)
        if label is None:
            label = self._labels[key] = LabelColumn(self.capacity)
            for name, row in self.index.items():
                info = self.infos[row]
                assert info is not None, name
                label.codes[row] = label.code(info.labels.get(key))
        return label

    def free(self) -> Ints:
        """Allocatable minus used, every row and column: a fresh matrix the caller owns."""
        return self.room.copy(order="F")

    def live_free(self) -> Ints:
        """Allocatable minus used as the table keeps it: read-only, and it changes with the
        table, so it is for reading now, not for keeping."""
        return self._live

    def is_live(self, free: Ints) -> bool:
        """Whether `free` is `live_free()`: what is derived from it can be kept up to date."""
        return free is self._live

    def free_of(self, node: NodeName) -> dict[str, int]:
        """`node`'s allocatable minus used, for every resource it has or uses."""
        row = self.index.get(node)
        if row is None:
            return {}
        return {
            resource: int(self.alloc[row, col] - self.used[row, col])
            for resource, col in self.columns.items()
            if self.alloc[row, col] or self.used[row, col]
        }

    def resources_of(self, vector: Ints) -> dict[str, int]:
        """A vector of column values as a resource → amount mapping, zeros left out."""
        return {self.resource_names[col]: int(v) for col, v in enumerate(vector.tolist()) if v}

    def vector(self, amounts: Mapping[str, int]) -> Ints:
        """A resource → amount mapping as one value per column (new resources get a column)."""
        cols = [(self.column(resource), amount) for resource, amount in amounts.items()]
        vector = np.zeros(len(self.resource_names), dtype=np.int64)
        for col, amount in cols:
            vector[col] = amount
        return vector


CHANGES_KEPT = 1024  # room changes remembered for `changed_rows`
_NO_ROWS = np.zeros(0, dtype=np.int64)


def _read_only(matrix: Ints) -> Ints:
    view = matrix.view()
    view.flags.writeable = False
    return view


def _with_column(matrix: Ints) -> Ints:
    grown = np.zeros((matrix.shape[0], matrix.shape[1] + 1), dtype=np.int64, order="F")
    grown[:, : matrix.shape[1]] = matrix
    return grown


def _with_rows(matrix: Ints, rows: int) -> Ints:
    grown = np.zeros((rows, matrix.shape[1]), dtype=np.int64, order="F")
    grown[: matrix.shape[0]] = matrix
    return grown
