"""A start bounded by its progress, not by the clock.

On 2 shared cores at a load of 30, fifteen services importing at once took longer than 30 s
to come up (their logs still empty: each needs about a second of CPU for its imports alone,
and gets a thirtieth of a core). No fixed bound suits both an idle machine and that one, so
a start fails when it stops moving instead: when for `stall_s` no service came up and those
still starting used next to no CPU (a process stuck on a lock or a wait that never ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

STALL_S: Final = 30.0
# CPU the still-starting services must use, together, to count as moving: a stuck one that
# polls (every 50 ms, say) uses a few ms a second, an import at load 30 some 60 ms.
MOVING_CPU_S: Final = 0.2


@dataclass
class Progress:
    """The last moment something moved, from readings of how many services are up and the
    CPU seconds the others have used so far."""

    stall_s: float = STALL_S
    moving_cpu_s: float = MOVING_CPU_S
    _up: int = -1
    _cpu_s: float = 0.0
    _moved_at_s: float = 0.0

    def still_moving(self, *, up: int, cpu_s: float, now_s: float) -> bool:
        """Record a reading; False once nothing moved for `stall_s`."""
        if up != self._up or cpu_s >= self._cpu_s + self.moving_cpu_s:
            self._up, self._cpu_s, self._moved_at_s = up, cpu_s, now_s
        return now_s - self._moved_at_s < self.stall_s
