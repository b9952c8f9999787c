"""Which Kueue gangs are placed, for the MUSTER_CLUSTERS heartbeat (`GangPermitState.capacity`):
kept sorted as they change, looking again only at the gangs touched since the last heartbeat.
Pure."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping

from muster.core.placement.model import GangSpec
from muster.gangpermit.submitted import KueueGang


class PlacedGangs:
    """Kueue gangs found placed, in order, and those whose placement may have changed since
    (None: any), so a heartbeat looks again at those only. Kept sorted as they change: a
    heartbeat (up to ten a second in a burst) copies the list instead of sorting every running
    workload again (2 ms at 6 000 of them)."""

    def __init__(self) -> None:
        self._placed: list[str] = []
        self._recheck: set[str] | None = None

    def touch(self, gang: str | None) -> None:
        """The placement of `gang` may have changed: `placed` looks at it again."""
        if gang is not None and self._recheck is not None:
            self._recheck.add(gang)

    def touch_all(self) -> None:
        """Any gang's placement may have changed (a node, a time-out, a preemption)."""
        self._recheck = None

    def placed(
        self, admitted: Mapping[str, KueueGang], is_placed: Callable[[GangSpec], bool]
    ) -> tuple[str, ...]:
        """The gangs of `admitted` that are placed now, in order."""
        if self._recheck is None:  # a full look
            self._placed = sorted(k for k, g in admitted.items() if is_placed(g.spec))
        else:  # a gang that left `admitted` was touched then: it is looked at here
            for key in self._recheck:
                gang = admitted.get(key)
                at = bisect.bisect_left(self._placed, key)
                there = at < len(self._placed) and self._placed[at] == key
                if gang is not None and is_placed(gang.spec):
                    if not there:
                        self._placed.insert(at, key)
                elif there:
                    del self._placed[at]
        self._recheck = set()
        return tuple(self._placed)
