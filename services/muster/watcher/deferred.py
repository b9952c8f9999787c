"""Workloads whose pending pods changed without news (`pods.pending_news`): each is decided again
once its pods have been still for `quiet_s` (longer for a larger set, `quiet_for`), or
`longest_s` after its first such change at the latest, so the last pending set is always told.
The quiet time grows with the set so that pods trickling in just slower than it (one a second
into a gang of 20 000) are told at most `BYTES_PER_S` a workload, not once a pod: the bytes
stay linear in the time the gang takes to apply, where a fixed second made them N². The
watcher's loop takes those due (`take_due`) after each batch, and when no batch comes
(`wait_s`). Pure: the time comes in.
"""

from __future__ import annotations

import heapq

QUIET_S = 1.0  # still this long: the set is told (a gang applied pod by pod: once, at its end)
LONGEST_S = 30.0  # a set that keeps changing is told at least this often
POD_BYTES = 68  # what one pod adds to a pods_pending event (docs/events.md, the audit table)
BYTES_PER_S = 16_384  # a trickling set's tells, per workload


def quiet_for(pending: int, *, quiet_s: float = QUIET_S, longest_s: float = LONGEST_S) -> float:
    """How long `pending` pods must be still before their set is told: long enough that its
    event, told that often, costs at most `BYTES_PER_S`, within [quiet_s, longest_s]."""
    return min(longest_s, max(quiet_s, pending * POD_BYTES / BYTES_PER_S))


class DeferredPending:
    """Workload → when its pending set is to be decided again."""

    def __init__(self, *, quiet_s: float = QUIET_S, longest_s: float = LONGEST_S) -> None:
        self._quiet_s = quiet_s
        self._longest_s = longest_s
        self._first_s: dict[str, float] = {}  # workload → its first change not decided
        self._due_s: dict[str, float] = {}
        # (due, workload), one per change of a due time: an entry whose time is no longer its
        # workload's is skipped when it comes up (cheaper than finding it on every change).
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._due_s)

    def __contains__(self, workload: str) -> bool:
        return workload in self._due_s

    def defer(self, workload: str, *, now_s: float, pending: int = 0) -> None:
        """`workload`'s `pending` pods changed at `now_s` and were not told."""
        first_s = self._first_s.setdefault(workload, now_s)
        quiet_s = quiet_for(pending, quiet_s=self._quiet_s, longest_s=self._longest_s)
        due_s = min(now_s + quiet_s, first_s + self._longest_s)
        if self._due_s.get(workload) != due_s:
            self._due_s[workload] = due_s
            heapq.heappush(self._heap, (due_s, workload))

    def drop(self, workload: str) -> None:
        """`workload`'s pending set was decided (told, or none is pending): nothing waits."""
        self._first_s.pop(workload, None)
        self._due_s.pop(workload, None)

    def take_due(self, *, now_s: float) -> list[str]:
        """The workloads due by `now_s`, in the order they came due, forgotten here."""
        taken: list[str] = []
        while self._heap and self._heap[0][0] <= now_s:
            due_s, workload = heapq.heappop(self._heap)
            if self._due_s.get(workload) == due_s:
                self.drop(workload)
                taken.append(workload)
        return taken

    def wait_s(self, *, now_s: float) -> float | None:
        """Seconds from `now_s` until the next workload is due (None: none waits)."""
        while self._heap and self._due_s.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)  # stale: its workload was dropped or is due later
        return max(0.0, self._heap[0][0] - now_s) if self._heap else None
