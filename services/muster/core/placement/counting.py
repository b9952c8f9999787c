"""How many pods of one signature fit on each node, in what order the nodes are taken, and which.

`fit_counts`, `order_key` and `choose` work on any matrix of free room. `RoomCache` keeps the
first two for the table's own free room (`NodeTable.live_free`), one per signature (`Rooms`),
updated only on the rows whose room changed since it last looked, and chooses from them
without sorting every node: what lets a pass over 50 000 nodes cost a fraction of a
millisecond. Pure, numpy only.
"""

from __future__ import annotations

import weakref

import numpy as np

from muster.core.placement.model import Scoring
from muster.core.placement.nodes import Bools, Floats, Ints, NodeTable
from muster.core.placement.signature import Signature


def fit_counts(table: NodeTable, sig: Signature, free: Ints, mask: Bools) -> Ints:
    """How many more pods of `sig` fit on each row of `free`, 0 outside `mask`."""
    demand = sig.demand(table)
    cols = sig.demand_cols.tolist()
    counts: Ints = free[:, cols[0]] // demand[cols[0]]
    for col in cols[1:]:
        np.minimum(counts, free[:, col] // demand[col], out=counts)
    np.maximum(counts, 0, out=counts)
    counts *= mask
    return counts


def order_key(
    table: NodeTable, sig: Signature, free: Ints, scoring: Scoring, *, rows: Ints | None = None
) -> Floats:
    """Lower is better: binpack prefers the least free room (the most allocated node), spread
    the most, as the sum of free fractions over the resources the pod requests. `free` holds
    every row of the table, or those of `rows` in that order."""
    inverse = table.inv_alloc if rows is None else table.inv_alloc[rows]
    cols = sig.score_cols
    room = free[:, cols[0]] * inverse[:, cols[0]]
    for col in cols[1:]:
        room += free[:, col] * inverse[:, col]
    return room if scoring == "binpack" else -room


def choose(
    counts: Ints, key: Floats, rank: Ints, wanted: int, scoring: Scoring
) -> tuple[Ints, Ints]:
    """Rows and pods per row for up to `wanted` pods, best rows first (ties by node name).

    binpack fills the best row before the next (what placing the pods one by one would do:
    a fuller node only gets better); spread deals them round-robin, one per row per round.
    """
    candidates = np.flatnonzero(counts > 0)
    if len(candidates) == 0 or wanted <= 0:
        return _EMPTY, _EMPTY
    keys = key[candidates]
    if scoring == "binpack" or wanted == 1:
        best = _best(candidates, keys, rank)
        if counts[best] >= wanted:
            return np.array([best]), np.array([wanted])
    ordered = candidates[np.lexsort((rank[candidates], keys))]
    per_row = counts[ordered]
    taken = _fill(per_row, wanted) if scoring == "binpack" else _deal(per_row, wanted)
    used = taken > 0
    return ordered[used], taken[used]


_EMPTY = np.zeros(0, dtype=np.int64)


def _best(candidates: Ints, keys: Floats, rank: Ints) -> int:
    ties = candidates[keys == keys.min()]
    return int(ties[np.argmin(rank[ties])]) if len(ties) > 1 else int(ties[0])


def _fill(per_row: Ints, wanted: int) -> Ints:
    """Take whole rows in order until `wanted` pods are placed (the last row partly)."""
    before = np.cumsum(per_row) - per_row
    taken: Ints = np.clip(wanted - before, 0, per_row)
    return taken


def _deal(per_row: Ints, wanted: int) -> Ints:
    """Round-robin: each round gives one pod to every row that still has room, in order."""
    wanted = min(wanted, int(per_row.sum()))
    low, high = 1, int(per_row.max())  # the smallest round that reaches `wanted`
    while low < high:
        mid = (low + high) // 2
        if int(np.minimum(per_row, mid).sum()) >= wanted:
            high = mid
        else:
            low = mid + 1
    taken = np.minimum(per_row, low - 1)
    last_round = per_row >= low
    extra = wanted - int(taken.sum())
    taken[last_round & (np.cumsum(last_round) <= extra)] += 1
    return taken


FEW = 8  # nodes taken one argmin each before one partition of every key is cheaper
FEW_ROWS = 8  # changed rows caught up one by one in Python before numpy's calls are cheaper


class RoomCache:
    """`fit_counts` and `order_key` of one signature over the table's own free room, kept up to
    date on the rows whose room changed (`NodeTable.changed_rows`).

    Position i holds the node of rank i (by name), so the first of equal keys is the node first
    by name, as `choose` breaks ties. A node with no room for the signature has key +inf.
    Rebuilt whole when a node's static facts, the set of nodes or the columns change.
    """

    __slots__ = ("by_rank", "counts", "keys", "positions", "room_version", "scoring", "shape")

    def __init__(self, table: NodeTable, sig: Signature, scoring: Scoring) -> None:
        self.scoring: Scoring = scoring
        self.shape = _shape(table)
        self.room_version = table.room_version
        self.by_rank: Ints = np.argsort(table.rank, kind="stable")[: table.size]
        self.positions: Ints = np.full(table.capacity, -1, dtype=np.int64)
        self.positions[self.by_rank] = np.arange(table.size)
        self.counts: Ints = np.zeros(table.size, dtype=np.int64)
        self.keys: Floats = np.zeros(table.size, dtype=np.float64)
        self._update(table, sig, self.by_rank, np.arange(table.size))

    def catch_up(self, table: NodeTable, sig: Signature) -> None:
        """Bring the counts and keys up to date with `table`'s room."""
        rows = table.changed_rows(self.room_version)
        if rows is not None and len(rows) <= FEW_ROWS:  # a pod or two placed or gone
            self._update_few(table, sig, rows.tolist())
            self.room_version = table.room_version
            return
        if rows is None or len(rows) > len(self.by_rank) // 8:  # cheaper all at once
            rows = self.by_rank
        positions = self.positions[rows]
        alive = positions >= 0
        self._update(table, sig, rows[alive], positions[alive])
        self.room_version = table.room_version

    def _update_few(self, table: NodeTable, sig: Signature, rows: list[int]) -> None:
        """`_update` of a few rows, one by one: the same integers and the same float sums in
        the same order (`fit_counts`, `order_key`), without numpy's cost per call, which is
        most of a one-pod gang's placement when only its node changed."""
        free = table.live_free()
        inverse = table.inv_alloc
        mask = sig.static_mask(table)
        demand = sig.demand(table)
        wanted = [(col, int(demand[col])) for col in sig.demand_cols.tolist()]
        scored = [int(col) for col in sig.score_cols]
        binpack = self.scoring == "binpack"
        for row in rows:
            position = int(self.positions[row])
            if position < 0:
                continue  # not a node now
            room = free[row].tolist()
            count = max(0, min(room[col] // amount for col, amount in wanted))
            if not mask[row]:
                count = 0
            self.counts[position] = count
            if count > 0:
                inverse_row = inverse[row].tolist()
                key = 0.0
                for n, col in enumerate(scored):
                    term = room[col] * inverse_row[col]
                    key = term if n == 0 else key + term
                self.keys[position] = key if binpack else -key
            else:
                self.keys[position] = np.inf

    def _update(self, table: NodeTable, sig: Signature, rows: Ints, positions: Ints) -> None:
        free = table.live_free()[rows]
        counts = fit_counts(table, sig, free, sig.static_mask(table)[rows])
        keys = order_key(table, sig, free, self.scoring, rows=rows)
        self.counts[positions] = counts
        self.keys[positions] = np.where(counts > 0, keys, np.inf)

    def choose(self, wanted: int) -> tuple[Ints, Ints]:
        """What `choose` answers for the same counts and keys, from the first nodes in order
        only: no node after the first `wanted` gets a pod, so the rest need no sorting."""
        if wanted <= 0 or len(self.keys) == 0:
            return _EMPTY, _EMPTY
        if self.scoring == "binpack" or wanted == 1:  # the best node alone, most often
            best = int(np.argmin(self.keys))
            if self.keys[best] == np.inf:
                return _EMPTY, _EMPTY
            if self.counts[best] >= wanted:
                return self.by_rank[best : best + 1], np.array([wanted])
        chosen = self._first(wanted) if self.scoring == "binpack" else None
        if chosen is None:
            chosen = self._first_sorted(wanted)
        if len(chosen) == 0:
            return _EMPTY, _EMPTY
        per_row = self.counts[chosen]
        taken = _fill(per_row, wanted) if self.scoring == "binpack" else _deal(per_row, wanted)
        used = taken > 0
        return self.by_rank[chosen[used]], taken[used]

    def _first(self, wanted: int) -> Ints | None:
        """The first nodes in order until `wanted` pods fit (or none is left), one argmin
        each; None if that takes more than `FEW`."""
        keys = self.keys
        chosen: list[int] = []
        saved: list[float] = []
        total = 0
        try:
            while len(chosen) < FEW:
                best = int(np.argmin(keys))
                if keys[best] == np.inf:
                    break
                chosen.append(best)
                saved.append(float(keys[best]))
                keys[best] = np.inf  # taken: the next argmin finds the next node
                total += int(self.counts[best])
                if total >= wanted:
                    break
            else:
                return None
        finally:
            keys[chosen] = saved
        return np.array(chosen, dtype=np.int64)

    def _first_sorted(self, wanted: int) -> Ints:
        """The first `wanted` nodes in order (all, if fewer have room), by one partition."""
        keys = self.keys
        first = min(wanted, int(np.count_nonzero(self.counts)))
        if first == 0:
            return _EMPTY
        bound = np.partition(keys, first - 1)[first - 1]
        below = np.flatnonzero(keys < bound)
        ties = np.flatnonzero(keys == bound)[: first - len(below)]
        chosen = np.concatenate([below, ties])
        return chosen[np.lexsort((chosen, keys[chosen]))]


class Rooms:
    """Every signature's `RoomCache` over one table with one scoring, forgotten with the
    signature."""

    def __init__(self, table: NodeTable, scoring: Scoring) -> None:
        self.table = table
        self.scoring: Scoring = scoring
        self._caches: weakref.WeakKeyDictionary[Signature, RoomCache] = weakref.WeakKeyDictionary()

    def __len__(self) -> int:
        return len(self._caches)

    def of(self, sig: Signature) -> RoomCache:
        """`sig`'s cache, brought up to date with the table."""
        table = self.table
        cache = self._caches.get(sig)
        if cache is None or cache.shape != _shape(table):
            cache = self._caches[sig] = RoomCache(table, sig, self.scoring)
        elif cache.room_version != table.room_version:
            cache.catch_up(table, sig)
        return cache


def _shape(table: NodeTable) -> tuple[int, int]:
    """What a cache is rebuilt for: the nodes' static facts and set, and the columns."""
    return (table.version, len(table.resource_names))
