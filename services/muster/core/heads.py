"""One head's turn in a round: admit it, preempt for it, or park it (Kueue's scheduler does
this per head in `schedule`; docs/adr/0002-admission-engine-split.md).

The engine walks a cohort tree's queues best first and hands each head here. A preemptor
keeps the quota its victims free until it is admitted or can never fit, so work after it
does not take that quota and evict-again loops cannot start (issue 20, docs/kueue-
compatibility.md).
"""

from __future__ import annotations

import msgspec

from muster.api.model import ReclaimWithinCohort
from muster.core.attempt import Attempt
from muster.core.conditions import NO_LONGER_FITS, PENDING_PREEMPTION, WAITING_FOR_VICTIMS
from muster.core.config import NAMESPACE_MISMATCH
from muster.core.flavors import Assignment, Mode
from muster.core.lifecycle import Lifecycle
from muster.core.preemption import Victims
from muster.core.queueing import Queueing
from muster.core.queues import PendingGroup, QueueRuntime, TreeRuntime
from muster.core.quota import FlavorResource
from muster.core.records import WorkloadRecord
from muster.core.routing.control import RoutingControl
from muster.core.state import EngineState
from muster.core.unreclaimable import Hold

# Kueue's scheduler (nominate), for a workload with a Retry or Rejected check.
FAILED_CHECKS = "The workload has failed admission checks"
_WAITING = "WaitingForQuota"  # no fit now, some would do once quota is released


class Heads:
    """Decides for the head of a queue, given the engine's state and its transitions."""

    def __init__(
        self,
        state: EngineState,
        queueing: Queueing,
        lifecycle: Lifecycle,
        routing: RoutingControl | None,
    ) -> None:
        self.state = state
        self.queueing = queueing
        self.lifecycle = lifecycle
        self.routing = routing

    def decide(
        self,
        tree: TreeRuntime,
        cq: QueueRuntime,
        group: PendingGroup,
        r: WorkloadRecord,
        listed_key: tuple[object, ...] | None,
    ) -> None:
        """Decide for head `r`; `listed_key` is the lower bound it was listed with, None when
        its turn is exact (the fair-sharing tournament). What `cq`'s head held with no victim
        goes (`unreclaimable`); `r` holds again if it is such a head."""
        held = self.queueing.take_hold(tree, cq)
        hold = self._decide(tree, cq, group, r, listed_key)
        self.queueing.replace_hold(tree, cq, held, hold)

    def _decide(
        self,
        tree: TreeRuntime,
        cq: QueueRuntime,
        group: PendingGroup,
        r: WorkloadRecord,
        listed_key: tuple[object, ...] | None,
    ) -> Hold | None:
        """`decide`, with `cq`'s hold out of the way; what `r` holds now."""
        state, queueing = self.state, self.queueing
        config = state.config
        if any(config.names_check(r.cluster_queue, c) for c in r.failed_checks):
            # Its turn again once the check says otherwise (`Engine.set_admission_check`).
            why = (config.reason("PendingEvaluation", "Pending"), FAILED_CHECKS)
            queueing.set_aside(tree, cq, group, r, why)
            return None
        problem = config.admissibility(r)
        if problem is not None:
            if problem[1] == NAMESPACE_MISMATCH and not group.shape:
                queueing.set_aside(tree, cq, group, r, problem)
            else:
                queueing.drop_reservation(r)
                queueing.park(tree, group, r, problem, {})
            return None
        held = self.routing.hold_back(state, r, group) if self.routing is not None else None
        if held is not None:
            queueing.drop_reservation(r)
            queueing.park(tree, group, r, (config.reason("WaitingForQuota", "Pending"), held), {})
            return None
        a, victims = self.attempt(r)
        if a.mode is Mode.FIT or victims is not None:
            key = queueing.sort_key(r, a)
            top = tree.peek_key() if listed_key is not None else None
            if listed_key is not None and key > listed_key and top is not None and key > top:
                cq.tree.list_queue(cq, key)  # others come first now; retry in order
                return None
            short = queueing.held_for_preemptors(tree, r, key, a, victims)
            if short:  # a preemptor held back keeps what it holds: its need is unchanged
                why = (config.reason("WaitingForQuota", "Pending"), NO_LONGER_FITS)
                queueing.park(tree, group, r, why, short)
                return None
        if a.mode is Mode.FIT:
            self._admit_head(cq, group, r, a)
            return None
        if r.key in state.awaiting_victims and a.mode is Mode.PREEMPT:
            # Restored as a preemptor whose victims stop (which they are is not recorded):
            # it waits, as it did, and preempts no one else.
            state.awaiting_victims.discard(r.key)
            self._await_victims(tree, cq, group, r, a, None)
            return None
        if victims is not None and r.key not in state.preempted_this_round:
            self._preempt_for(tree, cq, group, r, a, victims)
            return None
        state.awaiting_victims.discard(r.key)
        # Kueue: a workload that needs preemption but has no victim waits for quota.
        reason = a.pending_reason if a.mode is Mode.NO_FIT else "WaitingForQuota"
        if reason != "WaitingForQuota":
            queueing.drop_reservation(r)  # it cannot fit at all: a preemptor gives up
        # else a preemptor whose freed quota went to work ahead of it keeps what it holds
        why = (config.reason(reason, "Pending"), a.message)
        queueing.park(tree, group, r, why, queueing.wake_thresholds(cq.name, a))
        return self._unreclaimable(r, a) if a.mode is Mode.PREEMPT and victims is None else None

    def _unreclaimable(self, r: WorkloadRecord, a: Assignment) -> Hold | None:
        """Kueue holds capacity for a head that needs preemption and has no victim when its
        ClusterQueue cannot always reclaim (reclaimWithinCohort not Any); for as long as it
        heads a StrictFIFO queue (`unreclaimable`). A preemptor keeps its own reservation."""
        config = self.state.config
        cq = config.cluster_queues[r.cluster_queue]
        if cq.preemption.reclaim_within_cohort is ReclaimWithinCohort.ANY:
            return None
        if config.best_effort(r.cluster_queue) or self.queueing.reserved_counts(r) is not None:
            return None
        return Hold(
            key=r.key,
            order=self.queueing.sort_key(r, a),
            node=config.tree.cluster_queues[r.cluster_queue],
            request=a.usage,
            borrowing=a.borrowing > 0,
        )

    def attempt(self, r: WorkloadRecord) -> Attempt:
        """Head `r`'s attempt. A preemptor holding quota for its victims keeps the need it
        preempted for: admitted with those pod counts as soon as they fit (as the simulator's
        engine admits it at once when evicted quota is free at once, `_preempt_for`), or with
        the flavors it preempted for once those fit and a fresh attempt finds none (the flavor
        search, from the first again, may put a podset where another no longer fits), and
        still waiting for them while a fresh attempt finds no fit now (work before it took
        quota it needs). Its victims may come back into whatever else is free meanwhile; a
        fresh attempt for more pods, or one given up and made again, would evict them a second
        time for the same need. It gives up only when those counts can never fit."""
        reserved = self.queueing.reservation(r)
        if reserved is None:
            return self.state.attempts.attempt(r)
        held = self.state.attempts.assign(r, reserved.counts)
        if held.mode is Mode.FIT:
            return Attempt(held, None)
        fresh = self.state.attempts.attempt(r)
        if fresh.assignment.mode is not Mode.FIT and fresh.victims is None:
            kept = reserved.assignment and self._fits_now(r, reserved.assignment)
            if kept:
                return Attempt(kept, None)
        if fresh.assignment.mode is Mode.NO_FIT and held.pending_reason in ("", _WAITING):
            return Attempt(held, None)  # waits, holding what it has
        return fresh

    def _fits_now(self, r: WorkloadRecord, a: Assignment) -> Assignment | None:
        """`a` (the flavors `r` preempted for) as a fit, if what it uses is free now."""
        node = self.state.config.tree.cluster_queues[r.cluster_queue]
        if all(node.available(fr) >= amount for fr, amount in a.usage.items()):
            return msgspec.structs.replace(a, mode=Mode.FIT, message="", short=frozenset())
        return None

    def _admit_head(
        self, cq: QueueRuntime, group: PendingGroup, r: WorkloadRecord, a: Assignment
    ) -> None:
        group.pop_head()
        self.lifecycle.reserve(r, a)
        cq.list_group(group)
        self.queueing.list_queue(cq)

    def _preempt_for(
        self,
        tree: TreeRuntime,
        cq: QueueRuntime,
        group: PendingGroup,
        r: WorkloadRecord,
        a: Assignment,
        victims: Victims,
    ) -> None:
        """Evict `r`'s victims (those not already being evicted for it); the quota they free
        is `r`'s before anything that comes after it (Kueue reserves it in the cycle and keeps
        the preemptor at the head of its queue)."""
        state = self.state
        state.preempted_this_round.add(r.key)
        if state.hold_quota_until_stopped:
            self.lifecycle.preempt(r, victims)
            self._await_victims(tree, cq, group, r, a, len(victims.targets))
            return
        # The victims are gone at once: admit the preemptor now, before anything else can,
        # and wake parked work only for what is left over (most often nothing).
        deferred: dict[FlavorResource, int] = {}
        state.deferred = deferred
        try:
            again = self._evict_until_settled(r, a, victims)
            if again.mode is Mode.FIT:
                self._admit_head(cq, group, r, again)
                for fr, amount in again.usage.items():
                    deferred[fr] = deferred.get(fr, 0) - amount
            else:
                cq.list_group(group)
                self.queueing.list_queue(cq)
        finally:
            state.deferred = None
        for fr, amount in sorted(deferred.items()):
            if amount > 0:
                for woken in tree.release(fr, amount):
                    self.queueing.retry(woken)

    def _evict_until_settled(
        self, r: WorkloadRecord, a: Assignment, victims: Victims
    ) -> Assignment:
        """Evict `victims` (their quota is free at once) and decide for `r` again, as the
        services' engine does once they have stopped (`attempt`): its counts, with the flavors
        searched from the first again (Kueue's next cycle: markPreemptionOutcome drops
        LastAssignment), may land elsewhere and come up short. A fresh attempt that preempts
        others evicts those in turn; one that cannot fit leaves `r` holding what its victims
        freed, which the assignment it preempted for fits: it is admitted with that rather than
        leave the quota to its victims and evict one of them again for the same need."""
        attempts = self.state.attempts
        while True:
            self.lifecycle.preempt(r, victims)
            again = attempts.assign(r, [ps.count for ps in a.pod_sets])
            if again.mode is Mode.FIT:
                return again
            fresh = attempts.attempt(r)
            if fresh.victims is None or not fresh.victims.targets:  # nothing more to free
                break
            a, victims = fresh.assignment, fresh.victims
        if fresh.assignment.mode is Mode.FIT:
            return fresh.assignment
        return self._fits_now(r, a) or again

    def _await_victims(
        self,
        tree: TreeRuntime,
        cq: QueueRuntime,
        group: PendingGroup,
        r: WorkloadRecord,
        a: Assignment,
        count: int | None,
    ) -> None:
        """`r` waits for its `count` victims to stop (None: as recorded), holding what it
        will use against later work."""
        queueing = self.queueing
        queueing.set_reservation(tree, r, queueing.sort_key(r, a), a)
        if count is not None:
            reason = self.state.config.reason(WAITING_FOR_VICTIMS, "Pending")
            message = f"{a.message}{PENDING_PREEMPTION} {count} workload(s)"
            queueing.mark_pending(r, reason, message)
        tree.park(group, dict.fromkeys(a.short, 1))
        queueing.list_queue(cq)
