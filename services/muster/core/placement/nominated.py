"""Room kept for preemptors while their victims stop, and the free room each unit sees.

A nomination counts as used for every other unit of the same or a lower priority (as
kube-scheduler counts nominated pods of priority >= the pod's own): one matrix per preemptor
priority, rebuilt from the nominations when the nodes change. Owned by `PlacementState`, which
says when a nomination starts and ends.
"""

from __future__ import annotations

import numpy as np

from muster.core.placement.model import GangKey, NodeName, PodKey
from muster.core.placement.nodes import Ints, NodeTable
from muster.core.placement.records import Nomination


class NominatedRoom:
    """Every preemptor's nomination, by gang, and the victims' pods that still hold room.

    `version` grows with every change, so fits tried against the old room are dropped.
    """

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self.by_gang: dict[GangKey, Nomination] = {}
        self.evicting: dict[PodKey, GangKey] = {}  # victim pod -> its preemptor
        self.version = 0
        self._by_priority: dict[int, Ints] = {}
        self._shape: tuple[int, tuple[int, ...]] = (-1, ())

    def add(self, key: GangKey, nomination: Nomination) -> None:
        self._matrices()  # up to date before it changes
        self.by_gang[key] = nomination
        self._count(nomination, 1)
        self.version += 1
        for pod in nomination.victim_pods:
            self.evicting[pod] = key

    def remove(self, key: GangKey) -> None:
        self._matrices()
        nomination = self.by_gang.pop(key)
        self._count(nomination, -1)
        self.version += 1
        for pod in nomination.victim_pods:
            self.evicting.pop(pod, None)

    def move(self, nomination: Nomination, priority: int) -> None:
        """Count `nomination` at its preemptor's new priority."""
        if nomination.priority == priority:
            return
        self._matrices()
        self._count(nomination, -1)
        nomination.priority = priority
        self._count(nomination, 1)
        self.version += 1

    def _matrices(self) -> dict[int, Ints]:
        """The room nominated per preemptor priority, one matrix each; rebuilt from the
        nominations when nodes changed (rows are reused)."""
        shape = (self.table.version, self.table.alloc.shape)
        if shape != self._shape:
            self._shape = shape
            self._by_priority = {}
            for nomination in self.by_gang.values():
                self._count(nomination, 1)
        return self._by_priority

    def _count(self, nomination: Nomination, sign: int) -> None:
        table = self.table
        matrix = self._by_priority.get(nomination.priority)
        if matrix is None:
            matrix = self._by_priority[nomination.priority] = np.zeros_like(table.alloc)
        for node, sig, count in nomination.usage:
            row = table.index.get(node)
            if row is not None:
                demand = sig.demand(table)
                matrix[row, : len(demand)] += demand * (sign * count)

    def view(self, priority: int, *, own: GangKey | None) -> Ints:
        """Free room for a unit of `priority`: allocatable minus used, minus the room nominated
        for other preemptors of the same or a higher priority. Read it, never write it: with
        no such nomination it is the table's own (`NodeTable.live_free`), else a fresh matrix."""
        if not self.by_gang or all(n.priority < priority for n in self.by_gang.values()):
            return self.table.live_free()  # every matrix at `priority` or above is zero
        free = self.table.free()
        for level, matrix in self._matrices().items():
            if level >= priority:
                free -= matrix
        mine = None if own is None else self.by_gang.get(own)
        if mine is not None and mine.priority >= priority:
            for node, sig, count in mine.usage:
                row = self.table.index.get(node)
                if row is not None:
                    demand = sig.demand(self.table)
                    free[row, : len(demand)] += demand * count
        return free

    def free_of(self, node: NodeName) -> dict[str, int]:
        """`node`'s allocatable minus used and every nomination on it."""
        free = self.table.free_of(node)
        for nomination in self.by_gang.values():
            for name, sig, count in nomination.usage:
                if name == node:
                    demand = self.table.resources_of(sig.demand(self.table))
                    for resource, amount in demand.items():
                        free[resource] = free.get(resource, 0) - amount * count
        return free
