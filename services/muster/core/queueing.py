"""Queueing: where a pending workload waits and when it is worth trying again.

Enqueue onto a ClusterQueue's pending groups, list a queue in its cohort tree's order, park a
group whose head cannot be admitted (with the reason every member then waits for), set a
head aside, retry, and the quota a preemptor holds against later work while its victims stop.
Changes `EngineState`; decides nothing about quota (that is the round's, in `engine`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial

from muster.core.conditions import QUOTA_RESERVED, not_admitted
from muster.core.events import EventType
from muster.core.fairshare import ZERO, borrows_on, dominant_share, with_usage
from muster.core.flavors import Assignment
from muster.core.preemption import Victims
from muster.core.queues import (
    SET_ASIDE,
    FairStrictGroup,
    ListedTrees,
    LocalUsage,
    Park,
    PendingGroup,
    QueueRuntime,
    Reservation,
    TreeRuntime,
)
from muster.core.quota import FlavorResource, tree_id
from muster.core.records import Phase, WorkloadRecord
from muster.core.routing.control import RoutingControl
from muster.core.state import EngineState
from muster.core.tournament import Tournament
from muster.core.unreclaimable import Hold, Holds, released


class Queueing:
    """Enqueue, order, park and retry over one `EngineState` (and its routing, if any)."""

    def __init__(self, state: EngineState, routing: RoutingControl | None) -> None:
        self.state = state
        self.routing = routing
        self.holds = Holds()  # heads with no victim (Kueue: capacity for an unreclaimable head)

    def rebuild(self) -> None:
        """Make every tree's and ClusterQueue's queues anew and enqueue every pending workload
        again (after a configuration change)."""
        state = self.state
        config = state.config
        state.trees = {}
        state.listed = ListedTrees()
        state.queues = {}
        self.holds.clear()
        if self.routing is not None:
            self.routing.drop_held()  # every pending workload is enqueued again below
        fair = config.fair_sharing_enabled
        for name in sorted(config.cluster_queues):
            node = config.tree.cluster_queues[name]
            root = node.root()
            tree = state.trees.get(tid := tree_id(root))
            if tree is None:
                tournament = (
                    Tournament(state.fair_keys.key, partial(state.listed.add, tid))
                    if fair and root.is_cohort
                    else None
                )
                tree = state.trees[tid] = TreeRuntime(tid, root, tournament, state.listed)
            state.queues[name] = QueueRuntime(name, tree, node, self._local_usage(name))
        if state.admission_usage is not None:
            state.admission_usage.forget(config.local_queues)
        for r in state.records.values():
            r.group = None
            if r.phase is Phase.PENDING:
                self.enqueue(r)

    def _local_usage(self, cq: str) -> LocalUsage | None:
        """How `cq` weighs its LocalQueues' usage now, if it orders by it (admission fair
        sharing: configured, and `cq` asking for it, StrictFIFO or BestEffortFIFO)."""
        state = self.state
        if state.admission_usage is None or not state.config.usage_based(cq):
            return None
        return _LocalUsage(state)

    def enqueue(self, r: WorkloadRecord) -> None:
        r.phase = Phase.PENDING
        config = self.state.config
        cq_name, problem = config.resolve_queue(r)
        if problem is not None:
            r.cluster_queue = cq_name or ""
            self.mark_pending(r, config.reason("Misconfigured", "Inadmissible"), problem)
            return
        r.cluster_queue = cq_name or ""
        cq = self.state.queues[r.cluster_queue]
        strict = not config.best_effort(r.cluster_queue)
        shape = b"" if strict else r.shape
        if self.routing is not None and self.routing.is_routed(r.key):
            shape = b"routed:" + r.shape  # never in one group with the queue's own workloads
        group = cq.groups.get(shape)
        if group is None and strict and not shape and cq.local_usage is not None:
            group = cq.groups[shape] = FairStrictGroup(cq, shape, cq.local_usage)
        elif group is None:
            group = cq.groups[shape] = PendingGroup(cq, shape, r.local_queue if shape else "")
        elif group.shape == r.shape:
            r.shape = group.shape  # one copy of the bytes per group, not one per workload
        r.group = group
        parked = group.park is Park.PARKED
        old_head = group.head() if parked else None
        group.push(r)
        if parked and (old_head is None or group.head() is old_head):
            return  # behind a head that cannot be admitted: it cannot be either
        cq.list_group(group)
        self.list_queue(cq)

    def retry(self, group: PendingGroup) -> None:
        """List `group` and its ClusterQueue again: its head may be admissible now."""
        group.cq.list_group(group)
        self.list_queue(group.cq)

    def list_queue(self, cq: QueueRuntime) -> None:
        if cq.tree.tournament is not None:
            cq.tree.tournament.touch(cq)
            return
        group = cq.best_group()
        if group is None:
            return
        head = group.head()
        assert head is not None
        cq.tree.list_queue(cq, self.list_key(head))

    def list_key(self, r: WorkloadRecord) -> tuple[object, ...]:
        """A lower bound of `r`'s `sort_key`, known before its flavors are."""
        if self.state.config.fair_sharing_enabled:
            return (False, ZERO, -r.priority, r.queue_ts, r.seq)
        return (0, -r.priority, r.queue_ts, r.seq)

    def sort_key(self, r: WorkloadRecord, a: Assignment) -> tuple[object, ...]:
        """Kueue's cycle order. Classical: the borrowing level (how high in the cohort tree the
        quota comes from), then priority, then FIFO. Fair sharing: not borrowing on what it
        asks for first, then the share of its ClusterQueue with it admitted, then priority,
        then FIFO."""
        config = self.state.config
        if not config.fair_sharing_enabled:
            return (a.borrowing, -r.priority, r.queue_ts, r.seq)
        node = config.tree.cluster_queues[r.cluster_queue]
        with_usage(node, a.usage, 1)
        try:
            flag, share = borrows_on(node, a.usage), dominant_share(node)
        finally:
            with_usage(node, a.usage, -1)
        return (flag, share, -r.priority, r.queue_ts, r.seq)

    def mark_pending(self, r: WorkloadRecord, reason: str, message: str) -> None:
        self.say_waiting(r, reason, message)
        if message != r.pending_message:
            r.pending_message = message
            self.state.emit(EventType.PENDING, r, reason, message)

    def say_waiting(self, r: WorkloadRecord, reason: str, message: str) -> None:
        """QuotaReserved False with `reason`, and the Admitted condition Kueue syncs with it."""
        r.set_condition(QUOTA_RESERVED, False, reason, message)
        if self.state.config.kueue.granular_pending_reasons:
            r.set_condition(*not_admitted(reserved=False))

    def park(
        self,
        tree: TreeRuntime,
        group: PendingGroup,
        r: WorkloadRecord,
        why: tuple[str, str],
        thresholds: dict[tuple[str, str], int],
    ) -> None:
        """Park the head's group; every member of it waits for the same reason."""
        self.mark_pending(r, *why)
        group.why = why
        tree.park(group, thresholds)
        self.list_queue(group.cq)

    def set_aside(
        self,
        tree: TreeRuntime,
        cq: QueueRuntime,
        group: PendingGroup,
        r: WorkloadRecord,
        why: tuple[str, str],
    ) -> None:
        """StrictFIFO: a head whose namespace the ClusterQueue does not select steps aside and
        the next workload becomes the head (Kueue's one exception to head-of-line blocking,
        RequeueReasonNamespaceMismatch). A configuration change tries it again. So does a head
        with a failed admission check, in any queue, until a check says otherwise."""
        self.drop_reservation(r)
        group.pop_head()
        aside = cq.groups.get(SET_ASIDE)
        if aside is None:
            aside = cq.groups[SET_ASIDE] = PendingGroup(cq, SET_ASIDE)
        r.group = aside
        aside.push(r)
        self.mark_pending(r, *why)
        aside.why = why
        tree.park(aside, {})
        cq.list_group(group)
        self.list_queue(cq)

    def wake_thresholds(self, cq: str, a: Assignment) -> dict[tuple[str, str], int]:
        """How much must be released, per short resource, before the head is worth a retry.

        A queue that may preempt is retried on any release: victims plus freed quota may do.
        """
        if self.state.config.may_preempt(cq):
            return dict.fromkeys(a.shortages, 1)
        return dict(a.shortages)

    # --- quota held for preemptors (Kueue: the preemptor's usage counts in the cycle) ------

    def held_for_preemptors(
        self,
        tree: TreeRuntime,
        r: WorkloadRecord,
        key: tuple[object, ...],
        a: Assignment,
        victims: Victims | None,
    ) -> dict[FlavorResource, int]:
        """What `a` lacks once the quota held ahead of `r` in the cycle order counts as used:
        for preemptors (Kueue adds a preemptor's usage to the cycle's snapshot, so work after
        it cannot take what its victims free) and by StrictFIFO heads with no victim
        (`unreclaimable`); {} if it still fits."""
        config = self.state.config
        node = config.tree.cluster_queues[r.cluster_queue]
        kept = self.holds.ahead_of(tree.name, node, key, self.state.records)
        if not tree.reservations and not kept:
            return {}
        sticky = config.best_effort(r.cluster_queue)
        held = tree.hold_for(r, key, cq=node, sticky=sticky)
        for holder, amounts in kept:
            for fr, amount in amounts.items():
                holder.add_usage(fr, amount)
        if not held and not kept:
            return {}
        records = self.state.records
        gone = [records[k] for k in victims.targets] if victims is not None else []
        for v in gone:
            with_usage(config.tree.cluster_queues[v.cluster_queue], v.usage, -1)
        try:
            return {
                fr: val - max(0, node.available(fr))
                for fr, val in a.usage.items()
                if val > node.available(fr)
            }
        finally:
            for v in gone:
                with_usage(config.tree.cluster_queues[v.cluster_queue], v.usage, 1)
            for holder, amounts in kept:
                for fr, amount in amounts.items():
                    holder.add_usage(fr, -amount)
            tree.unhold(held)

    def take_hold(self, tree: TreeRuntime, cq: QueueRuntime) -> Hold | None:
        """`cq`'s hold, out of the way of its head's own attempt; `replace_hold` settles it."""
        return self.holds.replace(tree.name, cq.name, None)

    def replace_hold(
        self, tree: TreeRuntime, cq: QueueRuntime, old: Hold | None, new: Hold | None
    ) -> None:
        """`new` is what `cq`'s head holds now (None: nothing) in place of `old`; groups parked
        behind what it held and holds no more may be admissible."""
        self.holds.replace(tree.name, cq.name, new)
        self._wake(tree, released(old, new))

    def _wake(self, tree: TreeRuntime, freed: Iterable[tuple[FlavorResource, int]]) -> None:
        for fr, amount in freed:
            if amount > 0:
                for group in tree.release(fr, amount):
                    self.retry(group)

    def set_reservation(
        self, tree: TreeRuntime, r: WorkloadRecord, key: tuple[object, ...], a: Assignment
    ) -> None:
        self.drop_reservation(r, keep=a.usage)
        node = self.state.config.tree.cluster_queues[r.cluster_queue]
        self.state.reserving = True
        tree.reservations[r.key] = Reservation(
            order=key,
            queue_order=r.order_key,
            node=node,
            usage=a.usage,
            counts=tuple(ps.count for ps in a.pod_sets),
            assignment=a,
        )

    def reservation(self, r: WorkloadRecord) -> Reservation | None:
        """What preemptor `r` holds quota for, None if it holds none."""
        if not self.state.reserving:
            return None
        queue = self.state.queues.get(r.cluster_queue)
        return queue.tree.reservations.get(r.key) if queue is not None else None

    def reserved_counts(self, r: WorkloadRecord) -> tuple[int, ...] | None:
        """The pods per podset preemptor `r` holds quota for, None if it holds none."""
        held = self.reservation(r)
        return held.counts if held is not None else None

    def drop_reservation(
        self, r: WorkloadRecord, *, keep: Mapping[FlavorResource, int] | None = None
    ) -> None:
        """Forget what `r` held as a preemptor or as a head with no victim; what is no
        longer held (beyond `keep`) may help the groups parked in its tree."""
        queue = self.state.queues.get(r.cluster_queue)
        if queue is not None and self.holds.by_tree:
            tree = queue.tree
            self._wake(tree, released(self.holds.drop(tree.name, r.key)))
        if not self.state.reserving:
            return
        if queue is None or not queue.tree.reservations:
            return
        tree = queue.tree
        old = tree.reservations.pop(r.key, None)
        if old is None:
            return
        kept = keep or {}
        self._wake(tree, ((fr, n - kept.get(fr, 0)) for fr, n in old.usage.items()))


class _LocalUsage:
    """`LocalUsage` over the engine's clock and its `AdmissionUsage`."""

    __slots__ = ("state",)

    def __init__(self, state: EngineState) -> None:
        self.state = state

    def now_s(self) -> float:
        return self.state.now_s

    def usage(self, local_queue: str) -> float:
        return self.state.local_queue_usage(local_queue)
