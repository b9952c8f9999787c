"""Per-queue counts, usage and pending order, kept as records change; and what changed since
the views last asked.

A record held by the engine's state tells its `QueueIndex` around every change of what the
views read (phase, queues, assignment, queue-order timestamp: `records._indexed`), so the
index takes out what the record counted before and adds what it counts now. A view of one
queue then costs that queue's size at most, never the number of records (at a million pending
a walk over every record took seconds), and a caller that renders views (admission's
visibility) re-renders only the queues in `take_changes()`, and of a pending list only the
pages (`core.pending_pages`) that changed. A queue no record counts any more is dropped from
every table (ClusterQueues and LocalQueues come and go) when the configuration changes or the
views take their changes (admission renders them at least about once a second while anything
changes): not as each record changes, which would drop and make again the tallies and pages
of a queue its only workload passes through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from muster.core.pending_pages import PAGE_MAX, PAGE_MIN, PendingPages
from muster.core.quota import FlavorResource
from muster.core.records import Phase, WorkloadRecord

if TYPE_CHECKING:
    from muster.core.queues import PendingGroup

WAITING = frozenset({Phase.PENDING, Phase.BACKOFF})
_HOLDING = frozenset({Phase.RESERVED, Phase.ADMITTED, Phase.EVICTING})


class QueueTally:
    """One queue's counts and, per (flavor, resource), what its workloads hold (MilliUnits)."""

    __slots__ = ("admitted", "backoff", "pending", "reserved", "reserving", "used")

    def __init__(self) -> None:
        self.pending = 0  # waiting: Pending or Backoff
        self.backoff = 0  # of which Backoff (Kueue's gauges count them inadmissible)
        self.reserving = 0  # holding quota
        self.admitted = 0
        self.reserved: dict[FlavorResource, int] = {}  # by the workloads holding quota
        self.used: dict[FlavorResource, int] = {}  # by the admitted ones

    def wait(self, backoff: bool, sign: int) -> None:
        self.pending += sign
        if backoff:
            self.backoff += sign

    def hold(self, admitted: bool, usage: Mapping[FlavorResource, int], sign: int) -> None:
        self.reserving += sign
        _add(self.reserved, usage, sign)
        if admitted:
            self.admitted += sign
            _add(self.used, usage, sign)

    def is_empty(self) -> bool:
        return (
            not (self.pending or self.backoff or self.reserving or self.admitted or self.reserved)
            and not self.used
        )


def _add(totals: dict[FlavorResource, int], usage: Mapping[FlavorResource, int], sign: int) -> None:
    for fr, amount in usage.items():
        total = totals.get(fr, 0) + sign * amount
        if total:
            totals[fr] = total
        else:
            totals.pop(fr, None)  # an empty tally equals a new one; a zero request has none


class Changes:
    """Queues whose views changed: statuses, holdings (their cohort's availability changes
    with them), and per ClusterQueue the ids of the pending pages changed, made or dropped."""

    __slots__ = ("cluster_queues", "everything", "holdings", "local_queues", "pending_pages")

    def __init__(self, *, everything: bool) -> None:
        self.everything = everything  # configuration changed: every view may have
        self.cluster_queues: set[str] = set()
        self.local_queues: set[str] = set()
        self.holdings: set[str] = set()  # ClusterQueues whose reserved quota changed
        self.pending_pages: dict[str, set[int]] = {}


class QueueIndex:
    """Tallies per ClusterQueue and per LocalQueue key, each ClusterQueue's waiting records in
    admission order (priority, then queue-order timestamp, then arrival; in pages of
    `page_bounds`: (min, max) records), and per queue how
    many Pending records each pending group holds (Kueue's gauges count those of a parked
    group inadmissible: a group is parked and woken without its records changing, so the
    gauges ask each group, as few per queue as there are shapes)."""

    def __init__(self) -> None:
        self.cluster_queues: dict[str, QueueTally] = {}
        self.local_queues: dict[str, QueueTally] = {}
        self.waiting: dict[str, PendingPages] = {}
        self.page_bounds = (PAGE_MIN, PAGE_MAX)
        self.cluster_queue_groups: dict[str, dict[PendingGroup, int]] = {}
        self.local_queue_groups: dict[str, dict[PendingGroup, int]] = {}
        self.changes = Changes(everything=True)
        self._left: tuple[set[str], set[str]] = (set(), set())  # queues a record left: sweep

    @classmethod
    def of(cls, records: Iterable[WorkloadRecord]) -> QueueIndex:
        """An index counted afresh from `records` (the reference the kept one must equal)."""
        index = cls()
        for r in records:
            index.enter(r)
        return index

    def add(self, r: WorkloadRecord) -> None:
        """`r` is now the state's: counted, and told of its changes from now on."""
        self.enter(r)
        r._index = self

    def remove(self, r: WorkloadRecord) -> None:
        r._index = None
        self.leave(r)

    def config_changed(self) -> None:
        self.changes.everything = True
        self.sweep()

    def take_changes(self) -> Changes:
        """What changed since the last call; the next call starts from nothing changed."""
        self.sweep()
        changes, self.changes = self.changes, Changes(everything=False)
        return changes

    def sweep(self) -> None:
        """Drop what the queues records left count no more: an empty tally, waiting list or
        group count equals none."""
        cluster_queues, local_queues = self._left
        for names, tallies, groups in (
            (cluster_queues, self.cluster_queues, self.cluster_queue_groups),
            (local_queues, self.local_queues, self.local_queue_groups),
        ):
            for name in names:
                tally = tallies.get(name)
                if tally is not None and tally.is_empty():
                    del tallies[name]
                if not groups.get(name, True):
                    del groups[name]
        for name in cluster_queues:
            if not self.waiting.get(name, True):
                del self.waiting[name]
        cluster_queues.clear()
        local_queues.clear()

    def enter(self, r: WorkloadRecord) -> None:
        self._count(r, 1)

    def leave(self, r: WorkloadRecord) -> None:
        self._count(r, -1)

    def regroup(self, r: WorkloadRecord, group: PendingGroup | None) -> None:
        """Pending `r` moves from its group to `group` (told before `r.group` changes)."""
        self._left[0].add(r.cluster_queue)
        self._left[1].add(r.local_queue)
        self._group_count(r, r.group, -1)
        self._group_count(r, group, 1)

    def _group_count(self, r: WorkloadRecord, group: PendingGroup | None, sign: int) -> None:
        if group is None:
            return
        for table, queue in (
            (self.cluster_queue_groups, r.cluster_queue),
            (self.local_queue_groups, r.local_queue),
        ):
            counts = table.get(queue)
            if counts is None:
                counts = table[queue] = {}
            n = counts.get(group, 0) + sign
            if n:
                counts[group] = n
            else:
                del counts[group]

    def _count(self, r: WorkloadRecord, sign: int) -> None:
        cq, lq, phase = r.cluster_queue, r.local_queue, r.phase
        changes = self.changes
        cq_tally = self.cluster_queues.get(cq)
        if cq_tally is None:
            cq_tally = self.cluster_queues[cq] = QueueTally()
        lq_tally = self.local_queues.get(lq)
        if lq_tally is None:
            lq_tally = self.local_queues[lq] = QueueTally()
        if sign < 0:
            self._left[0].add(cq)
            self._left[1].add(lq)
        changes.cluster_queues.add(cq)
        changes.local_queues.add(lq)
        # What the phase counts as is asked once, not once per tally (a workload is counted
        # in and out about seven times on its way through).
        if phase in WAITING:
            backoff = phase is Phase.BACKOFF
            cq_tally.wait(backoff, sign)
            lq_tally.wait(backoff, sign)
            if not backoff:
                self._group_count(r, r.group, sign)
            pages = changes.pending_pages.get(cq)
            if pages is None:
                pages = changes.pending_pages[cq] = set()
            pages.update(self._reorder(cq, r, sign))
        elif phase in _HOLDING:
            usage, admitted = r.usage, phase is Phase.ADMITTED
            cq_tally.hold(admitted, usage, sign)
            lq_tally.hold(admitted, usage, sign)
            if usage:
                changes.holdings.add(cq)

    def _reorder(self, cq: str, r: WorkloadRecord, sign: int) -> list[int]:
        """Put `r` into (sign 1) or take it out of (-1) `cq`'s waiting list; the ids of the
        pages that changed."""
        waiting = self.waiting.get(cq)
        if sign > 0:
            if waiting is None:
                page_min, page_max = self.page_bounds
                waiting = self.waiting[cq] = PendingPages(page_min=page_min, page_max=page_max)
            return waiting.insert(r)
        if waiting is None:
            raise AssertionError(f"{r.key} is not waiting in ClusterQueue {cq!r}")
        return waiting.remove(r, cq)
