"""Placement preemption: the smallest set of whole lower-priority units (a pod, a group, a tree,
as their disruption mode says) whose room lets a gang or a tree fit. The candidates come from
`PlacementState`; `GangScheduler` says what fits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from muster.core.placement.fit import Group
from muster.core.placement.model import NodeName, PlacementPreempted, PodKey
from muster.core.placement.nodes import Ints, NodeTable
from muster.core.placement.records import GangRecord, Nomination
from muster.core.placement.state import PlacementState

POD, GROUP, TREE = 0, 1, 2  # what a victim is, least important first


@dataclass(frozen=True, slots=True)
class Candidate:
    """A unit that may be evicted as a whole (a pod, a group or workload, a CompositePodGroup
    tree, as its disruption mode says): the pods of it that hold room, with the row of each
    pod's node (-1 for a node the table no longer has) and its demand per column."""

    owner: str
    priority: int  # the highest of its pods
    created_s: float  # the earliest of its pods
    pods: tuple[PodKey, ...]
    rows: Ints  # one per pod
    demand: Ints  # pods × columns
    kind: int = GROUP  # POD, GROUP or TREE


def eviction_order(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Least important first, as workload-aware preemption (Kubernetes v1.37) spares them most
    important first: lower priority, then single pods before groups before trees, then smaller
    units, then the later started; ties by owner."""
    return sorted(
        candidates, key=lambda c: (c.priority, c.kind, len(c.pods), -c.created_s, c.owner)
    )


def candidates_below(state: PlacementState, priority: int) -> Pool:
    """Every unit whose pods holding room all have a priority below `priority`."""
    table = state.table
    candidates = []
    for owner, keys in state.holders.items():
        pods = [state.pods[k] for k in sorted(keys)]
        top = max(p.info.priority for p in pods)
        if top >= priority:
            continue
        rows = np.array([_row(table, p.node) for p in pods], dtype=np.int64)
        demand = np.array([p.sig.demand(table) for p in pods], dtype=np.int64)
        created_s = min(p.info.created_s for p in pods)
        pod_keys = tuple(p.info.key for p in pods)
        first = pods[0].info
        kind = POD if owner == first.key else TREE if first.tree_owner else GROUP
        candidates.append(Candidate(owner, top, created_s, pod_keys, rows, demand, kind))
    return Pool(candidates)


def usable_positions(state: PlacementState, pool: Pool, groups: Sequence[Group]) -> Ints:
    """Positions of the pool's workloads that have a pod on a node the gang's `groups` may use
    and are not being evicted for another gang already, in eviction order."""
    usable = np.logical_or.reduce([g.sig.static_mask(state.table) for g in groups])
    known = pool.rows >= 0
    keep = np.zeros(len(pool), dtype=np.bool_)
    keep[pool.candidate_of[known][usable[pool.rows[known]]]] = True
    for key in state.nominated.evicting:
        found = pool.position(state.pods[key].owner)
        if found is not None:
            keep[found] = False
    return np.flatnonzero(keep)


def _row(table: NodeTable, node: NodeName | None) -> int:
    row = None if node is None else table.index.get(node)
    return -1 if row is None else row


class Pool:
    """Candidates in eviction order, with their pods' rows and demand as flat arrays, so that
    the room of any subset of them is one vectorised sum. Subsets are lists of positions."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self.candidates = eviction_order(candidates)
        self._position = {c.owner: n for n, c in enumerate(self.candidates)}
        sizes = [len(c.rows) for c in self.candidates]
        self._ends = np.cumsum(sizes, dtype=np.int64)
        self.rows: Ints = np.zeros(0, dtype=np.int64)
        self.demand: Ints = np.zeros((0, 1), dtype=np.int64)
        if self.candidates:
            self.rows = np.concatenate([c.rows for c in self.candidates])
            self.demand = np.concatenate([c.demand for c in self.candidates])
        self.candidate_of: Ints = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)

    def __len__(self) -> int:
        return len(self.candidates)

    def position(self, owner: str) -> int | None:
        return self._position.get(owner)

    def room(self, free: Ints, positions: Ints) -> Ints:
        """`free` plus the room the candidates at `positions` (ascending) hold: a new matrix."""
        out = free.copy(order="F")
        pods = self._pods_of(positions)
        rows, demand = self.rows[pods], self.demand[pods]
        known = rows >= 0
        np.add.at(out, rows[known], demand[known])
        return out

    def touching(self, positions: Ints, rows: Ints) -> Ints:
        """Those of `positions` (ascending) with a pod on one of `rows`."""
        pods = self._pods_of(positions)
        hit = np.isin(self.rows[pods], rows)
        found: Ints = np.unique(self.candidate_of[pods][hit])
        return found

    def _pods_of(self, positions: Ints) -> slice | npt.NDArray[np.bool_]:
        if len(positions) == 0:
            return slice(0, 0)
        if positions[-1] == len(positions) - 1:  # a prefix: the first pods, in order
            return slice(0, int(self._ends[positions[-1]]))
        chosen = np.zeros(len(self.candidates), dtype=np.bool_)
        chosen[positions] = True
        mask: npt.NDArray[np.bool_] = chosen[self.candidate_of]
        return mask


Placing = Callable[[Sequence[int]], "Sequence[int] | None"]


def pick_victims(count: int, place: Placing) -> list[int] | None:
    """Positions (in eviction order, among `count` candidates) of the workloads to evict so
    that the gang fits, or None if even all of them do not make it fit.

    `place(positions)` places the gang with the room of those candidates freed: None if it does
    not fit, else the candidates among them that hold room on a node the placement uses.
    Candidates are taken in order until the gang fits; those whose room the placement does not
    touch are dropped, then every other victim that is not needed, last taken first: no
    victim in the result can be spared.
    """
    if count == 0 or place(range(count)) is None:
        return None
    # 1. the shortest prefix that fits (room only grows with the prefix, so bisect it)
    low, high = 1, count
    while low < high:
        mid = (low + high) // 2
        if place(range(mid)) is None:
            low = mid + 1
        else:
            high = mid
    touched = place(range(high))
    chosen = list(range(high))
    if touched is not None and place(touched) is not None:
        chosen = list(touched)  # the others' room was not even used
    # 2. drop what is not needed, last taken first
    for victim in reversed(list(chosen)):
        rest = [n for n in chosen if n != victim]
        if rest and place(rest) is not None:
            chosen = rest
    return chosen


Placed = list[tuple[Group, Ints, Ints]]  # each group placed: its rows and pods per row


def preempt(
    state: PlacementState,
    pool: Pool,
    unit: GangRecord,
    priority: int,
    groups: Sequence[Group],
    place: Callable[[Ints], Placed | None],
) -> PlacementPreempted | None:
    """Evict the fewest victims of `pool` (below `priority`) that let `unit` (a gang, or a
    tree's root, whose pods are `groups`, placed by `place` on a matrix of free room) fit, and
    nominate their room for it; None if no such set exists. Victims are spared most important
    first (`eviction_order`, `pick_victims`)."""
    base = state.nominated.view(priority, own=unit.key)
    usable = usable_positions(state, pool, groups)  # in eviction order

    def placing(victims: Sequence[int]) -> Sequence[int] | None:
        if isinstance(victims, range):  # a prefix, as a slice: no list of them built
            positions = usable[victims.start : victims.stop]
        else:
            positions = usable[np.asarray(victims, dtype=np.int64)]
        placed = place(pool.room(base, positions))
        if placed is None:
            return None
        rows = np.concatenate([rows for _, rows, _ in placed])
        touched = np.flatnonzero(np.isin(positions, pool.touching(positions, rows)))
        return [victims[n] for n in touched.tolist()]

    chosen = pick_victims(len(usable), placing)
    if chosen is None:
        return None
    positions = usable[np.asarray(chosen, dtype=np.int64)]
    placed = place(pool.room(base, positions))
    assert placed is not None
    victims = [pool.candidates[n] for n in positions.tolist()]
    usage = [
        (state.table.name(row), group.sig, count)
        for group, rows, counts in placed
        for row, count in zip(rows.tolist(), counts.tolist(), strict=True)
    ]
    state.nominate(unit, Nomination(priority, usage, {k for v in victims for k in v.pods}))
    owners = sorted(victim.owner for victim in victims)
    every_pod = sorted(k for owner in owners for k in state.owned.get(owner, ()))
    unit.reason = f"preempting {len(owners)} workload(s): {', '.join(owners)}"
    return PlacementPreempted(gang=unit.key, victims=tuple(owners), pods=tuple(every_pod))
