"""When trying gangs run out of time: a heap of deadlines, stale entries skipped.

A gang's deadline starts at its first attempt (`GangRecord.deadline_s`); an entry stays in the
heap after the gang was placed, timed out or started a new try, and is dropped when it comes up
no longer matching the gang. Owned by `PlacementState`.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from muster.core.placement.model import GangKey
from muster.core.placement.records import GangRecord


class Deadlines:
    def __init__(self, gangs: Mapping[GangKey, GangRecord], *, default_timeout_s: float) -> None:
        self._gangs = gangs
        self._default_timeout_s = default_timeout_s
        self._heap: list[tuple[float, GangKey]] = []

    def push(self, gang: GangRecord) -> None:
        """Remember `gang`'s deadline, if it has one now."""
        deadline = gang.deadline_s(self._default_timeout_s)
        if deadline is not None:
            heapq.heappush(self._heap, (deadline, gang.key))

    def _valid(self, deadline: float, key: GangKey) -> bool:
        gang = self._gangs.get(key)
        return (
            gang is not None
            and not gang.placed
            and not gang.timed_out
            and gang.deadline_s(self._default_timeout_s) == deadline
        )

    def take_due(self, now_s: float) -> list[GangKey]:
        """The gangs whose deadline has come by `now_s`, each taken once."""
        due = []
        while self._heap and self._heap[0][0] <= now_s:
            deadline, key = heapq.heappop(self._heap)
            if self._valid(deadline, key):
                due.append(key)
        return due

    def next_s(self) -> float | None:
        """The earliest deadline still valid; None if none."""
        while self._heap:
            deadline, key = self._heap[0]
            if self._valid(deadline, key):
                return deadline
            heapq.heappop(self._heap)
        return None
