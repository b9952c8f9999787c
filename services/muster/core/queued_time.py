"""How long one workload has waited in its queue, over every wait: the WAITED column of
`muster run`'s and `muster simulate`'s tables (the launcher and the simulator keep one each).

A wait starts when the workload is queued (created, or requeued after an eviction or a
resume: Kueue's Requeued condition turning True) and ends at its admission, or when that
attempt ends without one (evicted while its checks ran, deactivated, finished). The time
between an eviction and its requeue (pods stopping, back-off) is not queued time, as Kueue's
admission wait time does not count it either. The times are the caller's: no clock here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class QueuedTime:
    """Completed waits summed, and the start of the open one (None when not queued)."""

    total_s: float = 0.0
    since_s: float | None = None

    def queued(self, now_s: float) -> None:
        """Queued at `now_s`; a second call while already queued keeps the earlier start."""
        if self.since_s is None:
            self.since_s = now_s

    def dequeued(self, now_s: float) -> None:
        """Out of the queue at `now_s` (admitted, or the attempt ended); no-op when not queued.
        A clock that reads earlier than the start (an event that beat the Submit's reply)
        counts as no wait, never a negative one."""
        if self.since_s is not None:
            self.total_s += max(0.0, now_s - self.since_s)
            self.since_s = None

    def waited_s(self, now_s: float) -> float:
        """Every completed wait plus the open one up to `now_s`."""
        open_s = 0.0 if self.since_s is None else max(0.0, now_s - self.since_s)
        return self.total_s + open_s
