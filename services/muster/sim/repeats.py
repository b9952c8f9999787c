"""When a simulation with no fact or engine timer left only repeats itself.

A pod that fits no node keeps its workload's gang waiting until the gang's deadline; the
workload is evicted, requeued at once, admitted again, and its gang waits again: the same
cycle for ever, with nothing scheduled that could break it. `Repeats` remembers the state at
each such idle instant (only gang deadlines ahead); once one recurs, every later cycle is the
one just simulated, so the run can end there.
"""

from __future__ import annotations


class Repeats:
    """The states seen at idle instants, each with the first time it was seen."""

    def __init__(self) -> None:
        self.seen: dict[bytes, float] = {}

    def first_seen_s(self, state: bytes, now_s: float) -> float | None:
        """When `state` was seen before now, or None (and it is remembered as of `now_s`)."""
        first_s = self.seen.setdefault(state, now_s)
        return first_s if first_s < now_s else None
