"""Per-queue counts, usage and pending order, kept as records change; and what changed since
the views last asked.

A record held by the engine's state tells its `QueueIndex` around every change of what the
views read (phase, queues, assignment, queue-order timestamp: `records._indexed`), so the
index takes out what the record counted before and adds what it counts now. A view of one
queue then costs that queue's size at most, never the number of records (at a million pending
a walk over every record took seconds), and a caller that renders views (admission's
visibility) re-renders only the queues in `take_changes()`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING

from muster.core.quota import FlavorResource
from muster.core.records import Phase, WorkloadRecord

if TYPE_CHECKING:
    from muster.core.queues import PendingGroup

WAITING = frozenset({Phase.PENDING, Phase.BACKOFF})
_HOLDING = frozenset({Phase.RESERVED, Phase.ADMITTED, Phase.EVICTING})
_order = attrgetter("order_key")


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

    def add(self, phase: Phase, usage: Mapping[FlavorResource, int], sign: int) -> None:
        if phase in WAITING:
            self.pending += sign
            if phase is Phase.BACKOFF:
                self.backoff += sign
        elif phase in _HOLDING:
            self.reserving += sign
            _add(self.reserved, usage, sign)
            if phase is Phase.ADMITTED:
                self.admitted += sign
                _add(self.used, usage, sign)


def _add(totals: dict[FlavorResource, int], usage: Mapping[FlavorResource, int], sign: int) -> None:
    for fr, amount in usage.items():
        total = totals.get(fr, 0) + sign * amount
        if total:
            totals[fr] = total
        else:
            del totals[fr]  # an empty tally equals a new one


class Changes:
    """Queues whose views changed: statuses, holdings (their cohort's availability changes
    with them), and per ClusterQueue the first pending position that moved."""

    __slots__ = ("cluster_queues", "everything", "holdings", "local_queues", "pending_from")

    def __init__(self, *, everything: bool) -> None:
        self.everything = everything  # configuration changed: every view may have
        self.cluster_queues: set[str] = set()
        self.local_queues: set[str] = set()
        self.holdings: set[str] = set()  # ClusterQueues whose reserved quota changed
        self.pending_from: dict[str, int] = {}


class QueueIndex:
    """Tallies per ClusterQueue and per LocalQueue key, each ClusterQueue's waiting records in
    admission order (priority, then queue-order timestamp, then arrival), and per queue how
    many Pending records each pending group holds (Kueue's gauges count those of a parked
    group inadmissible: a group is parked and woken without its records changing, so the
    gauges ask each group, as few per queue as there are shapes)."""

    def __init__(self) -> None:
        self.cluster_queues: dict[str, QueueTally] = {}
        self.local_queues: dict[str, QueueTally] = {}
        self.waiting: dict[str, list[WorkloadRecord]] = {}
        self.cluster_queue_groups: dict[str, dict[PendingGroup, int]] = {}
        self.local_queue_groups: dict[str, dict[PendingGroup, int]] = {}
        self.changes = Changes(everything=True)

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

    def take_changes(self) -> Changes:
        """What changed since the last call; the next call starts from nothing changed."""
        changes, self.changes = self.changes, Changes(everything=False)
        return changes

    def enter(self, r: WorkloadRecord) -> None:
        self._count(r, 1)

    def leave(self, r: WorkloadRecord) -> None:
        self._count(r, -1)

    def regroup(self, r: WorkloadRecord, group: PendingGroup | None) -> None:
        """Pending `r` moves from its group to `group` (told before `r.group` changes)."""
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
        usage = r.usage
        changes = self.changes
        tally = self.cluster_queues.get(cq)
        if tally is None:
            tally = self.cluster_queues[cq] = QueueTally()
        tally.add(phase, usage, sign)
        tally = self.local_queues.get(lq)
        if tally is None:
            tally = self.local_queues[lq] = QueueTally()
        tally.add(phase, usage, sign)
        changes.cluster_queues.add(cq)
        changes.local_queues.add(lq)
        if phase in WAITING:
            if phase is Phase.PENDING:
                self._group_count(r, r.group, sign)
            position = self._reorder(cq, r, sign)
            moved = changes.pending_from.get(cq)
            if moved is None or position < moved:
                changes.pending_from[cq] = position
        elif phase in _HOLDING and usage:
            changes.holdings.add(cq)

    def _reorder(self, cq: str, r: WorkloadRecord, sign: int) -> int:
        """Put `r` into (sign 1) or take it out of (-1) `cq`'s waiting list; its position."""
        waiting = self.waiting.get(cq)
        if waiting is None:
            waiting = self.waiting[cq] = []
        key = r.order_key
        if sign > 0 and (not waiting or _order(waiting[-1]) < key):
            waiting.append(r)  # the usual arrival: last of its queue
            return len(waiting) - 1
        position = bisect_left(waiting, key, key=_order)
        if sign > 0:
            waiting.insert(position, r)  # order keys end with the arrival: never equal
            return position
        if position == len(waiting) or waiting[position] is not r:
            raise AssertionError(f"{r.key} is not waiting in ClusterQueue {cq!r}")
        del waiting[position]
        return position
