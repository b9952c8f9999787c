"""What a StrictFIFO head that must preempt, and finds no victim, holds from later heads.

Kueue (pkg/scheduler/scheduler.go, reserveCapacityForUnreclaimablePreempt, v0.19-v0.20):
when a ClusterQueue cannot always reclaim its quota (reclaimWithinCohort is not Any), such a
head's request, capped at what its ClusterQueue could still take (`reserved`), counts as used
for the rest of the cycle, so the heads after it cannot take it. (With Any, Kueue holds only
for a preemptor behind the alpha gate PrioritizePreemptorWorkloads, off by default.)

StrictFIFO puts the head back at once, so it holds in every cycle for as long as it heads its
queue: muster, deciding in one round what Kueue's successive cycles would, holds for it until
it is admitted, leaves, or stops being the head. BestEffortFIFO parks it as inadmissible, and
the heads its one cycle skipped are requeued at once (FailedAfterNomination) and decided again
the next cycle without it: in one round that is no hold (differs from Kueue only where a head
skipped in that cycle loses the quota to a smaller one admitted after it in the same cycle).

A hold is never trusted as remembered: each use checks that its workload is still pending at
the head of its queue (`live`) and recomputes the amount from the usage of that moment, so a
head deleted, deactivated, moved, admitted or passed holds nothing. A configuration change
drops every hold, and the next round decides every head again: a replica rebuilt from its
streams or a snapshot makes the same holds in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from muster.api.model import WorkloadKey
from muster.core.quota import FlavorResource, QuotaNode
from muster.core.records import Phase, WorkloadRecord


class Hold(NamedTuple):
    """A ClusterQueue's head that needs preemption and has no victim, as decided."""

    key: WorkloadKey
    order: tuple[object, ...]  # its cycle order: heads after it may not take what it holds
    node: QuotaNode  # its ClusterQueue
    request: Mapping[FlavorResource, int]  # its assignment's usage
    borrowing: bool  # the assignment borrows (Kueue then caps at nominal + borrowingLimit)


def reserved(hold: Hold) -> dict[FlavorResource, int]:
    """Kueue's quotaResourcesToReserve: the request, capped at what the ClusterQueue's
    nominal quota (or, when borrowing, nominal plus borrowing limit) leaves unused."""
    node = hold.node
    out: dict[FlavorResource, int] = {}
    for fr, amount in hold.request.items():
        used = node.usage.get(fr, 0)
        if hold.borrowing:
            limit = node.borrowing_limit.get(fr)
            room = amount if limit is None else node.nominal.get(fr, 0) + limit - used
        else:
            room = node.nominal.get(fr, 0) - used
        held = min(amount, room)
        if held > 0:
            out[fr] = held
    return out


def live(hold: Hold, r: WorkloadRecord | None) -> bool:
    """`hold`'s workload `r` is still pending at the head of the queue it held for."""
    return (
        r is not None
        and r.phase is Phase.PENDING
        and r.cluster_queue == hold.node.name
        and r.group is not None
        and r.group.head() is r
    )


def released(old: Hold | None, new: Hold | None = None) -> list[tuple[FlavorResource, int]]:
    """What replacing hold `old` by `new` stops requesting, per resource: the groups parked
    behind it are worth a retry. The same head holding as much again frees nothing: waking
    what it keeps out would let two such heads wake each other for ever."""
    if old is None:
        return []
    if new is None or new.key != old.key or new.order != old.order:
        return sorted(old.request.items())
    return sorted(
        (fr, amount - new.request.get(fr, 0))
        for fr, amount in old.request.items()
        if amount > new.request.get(fr, 0)
    )


class Holds:
    """The holds of every cohort tree, at most one per ClusterQueue (its head's)."""

    def __init__(self) -> None:
        self.by_tree: dict[str, dict[str, Hold]] = {}

    def clear(self) -> None:
        """A configuration change: every head is decided again."""
        self.by_tree.clear()

    def replace(self, tree: str, cq: str, new: Hold | None) -> Hold | None:
        """Make `new` `cq`'s hold (None: it holds nothing); return the hold it replaces."""
        holds = self.by_tree.get(tree)
        old = holds.pop(cq, None) if holds is not None else None
        if new is not None:
            self.by_tree.setdefault(tree, {})[cq] = new
        elif holds is not None and not holds:
            del self.by_tree[tree]
        return old

    def drop(self, tree: str, key: WorkloadKey) -> Hold | None:
        """Workload `key` left its queue: the hold it made, if any, goes."""
        for cq, hold in self.by_tree.get(tree, {}).items():
            if hold.key == key:
                return self.replace(tree, cq, None)
        return None

    def ahead_of(
        self,
        tree: str,
        node: QuotaNode,
        order: tuple[object, ...],
        records: Mapping[WorkloadKey, WorkloadRecord],
    ) -> list[tuple[QuotaNode, dict[FlavorResource, int]]]:
        """What the holds that go before a head of ClusterQueue `node` at `order` in the
        cycle keep from it, per holding ClusterQueue."""
        out = []
        for hold in self.by_tree.get(tree, {}).values():
            if hold.node is node or not hold.order < order:
                continue
            if live(hold, records.get(hold.key)):
                out.append((hold.node, reserved(hold)))
        return out
