"""One workload's life: reserve, admit, evict, release, back off, deactivate.

Each transition changes the record, the usage and the queues in `EngineState` and emits what
it did. The restore paths (a restarted service replaying decisions it published) reuse them:
`hold` with `announce` False puts quota back without deciding or reporting anything.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

import msgspec

from muster.api.model import Admission, Workload, WorkloadKey
from muster.api.wellknown import PREEMPTED
from muster.core.conditions import (
    ADMISSION_CHECK,
    ADMITTED,
    BACKING_OFF,
    BACKOFF_FINISHED,
    BACKOFF_FINISHED_MESSAGE,
    DEACTIVATED,
    DEACTIVATED_MESSAGE,
    EVICTED,
    FINISHED,
    NOT_READY_MESSAGE,
    PODS_READY,
    PODS_READY_TIMEOUT,
    QUOTA_RESERVED,
    REQUEUED,
    REQUEUING_LIMIT_EXCEEDED,
    REQUEUING_LIMIT_MESSAGE,
    WAIT_FOR_RECOVERY,
    WAIT_FOR_RECOVERY_MESSAGE,
    WAIT_FOR_START,
    not_admitted,
    requeued_when_queued,
    unreserved,
)
from muster.core.events import EventType
from muster.core.flavors import Assignment, Mode
from muster.core.preemption import Victims
from muster.core.preemption_message import preemption_message
from muster.core.queueing import Queueing
from muster.core.quota import FlavorResource
from muster.core.reclaim import requested_usage
from muster.core.records import Phase, WorkloadRecord, local_queue_of
from muster.core.requeue_state import backoff_end_s, count_after_eviction, later
from muster.core.routing.control import RoutingControl, Take
from muster.core.state import EngineState, shape_of


class Lifecycle:
    """Transitions of one workload at a time over one `EngineState`."""

    def __init__(
        self, state: EngineState, queueing: Queueing, routing: RoutingControl | None
    ) -> None:
        self.state = state
        self.queueing = queueing
        self.routing = routing

    # --- quota held ----------------------------------------------------------------------

    def reserve(self, r: WorkloadRecord, a: Assignment) -> None:
        """Reserve quota; admit at once unless admission checks must pass first."""
        state = self.state
        if state.reserving:
            self.queueing.drop_reservation(r, keep=a.usage)
        if state.config.fair_sharing_enabled:  # only the fair-sharing order caches per head
            state.attempts.forget(r.key)
            state.fair_keys.forget(r.key)
        r.evicted_by = None
        # Counted once, as it ends (admitted, most often): the views read nothing meanwhile.
        index = r.unindexed()
        try:
            self.hold(r, a, announce=True)
            # Kueue resets the checks only at an eviction: a Ready told since, while it waited,
            # counts now, as the status it stays in does (`WorkloadRecord.tell_check`).
            r.checks = r.take_told_checks(state.config.checks_for(r.cluster_queue, a))
            if all(s == "Ready" for s in r.checks.values()):
                self.admit(r)
            elif state.config.kueue.granular_pending_reasons:
                r.set_condition(*not_admitted(reserved=True))
        finally:
            r.reindexed(index)

    def hold(self, r: WorkloadRecord, a: Assignment, *, announce: bool) -> None:
        """`r` holds `a` in its ClusterQueue (QuotaReserved). Announced, its route is final
        and held groups it releases are retried; not (a restore), its route is only settled."""
        state = self.state
        index = r.unindexed()
        r.assignment = a
        r.phase = Phase.RESERVED
        r.reindexed(index)
        r.reserved_at_s = state.now_s
        r.evicted = False
        r.pending_message = ""
        state.usage.hold(r)
        book, fair = state.admission_usage, state.config.kueue.admission_fair_sharing
        if book is not None and fair is not None:
            book.start(
                r.key,
                r.local_queue,
                r.usage,
                at_s=state.now_s,
                config=fair,
                penalized=state.config.usage_based(r.cluster_queue),
                requested=requested_usage(a.pod_sets, r.wl.pod_sets, r.reclaimable),
            )
        if self.routing is not None and announce:
            for group in self.routing.started(state, r):
                self.queueing.retry(group)
        elif self.routing is not None:
            self.routing.settle(r.key)
        message = f"Quota reserved in ClusterQueue {r.cluster_queue}"
        r.set_condition(QUOTA_RESERVED, True, "QuotaReserved", message)
        r.drop_conditions(EVICTED, PREEMPTED)
        if announce:
            state.emit(EventType.QUOTA_RESERVED, r, "QuotaReserved", message)

    def admit(self, r: WorkloadRecord) -> None:
        state = self.state
        r.phase = Phase.ADMITTED
        message = f"The workload is admitted to ClusterQueue {r.cluster_queue}"
        r.set_condition(ADMITTED, True, "Admitted", message)
        state.emit(EventType.ADMITTED, r, "Admitted", message)
        wait = state.config.kueue.wait_for_pods_ready
        if wait.enable and not r.pods_ready:
            r.pods_ready_deadline_s = state.now_s + wait.timeout_seconds
            r.set_condition(PODS_READY, False, WAIT_FOR_START, NOT_READY_MESSAGE)
            state.add_timer(r.pods_ready_deadline_s, "pods-ready", r.key)

    def arrive_admitted(self, r: WorkloadRecord, admission: Admission) -> None:
        """A workload that arrives with status.admission holds that quota from the start:
        admitted, unless its conditions say it has only reserved quota (QuotaReserved but not
        Admitted), when its admission checks start from the states its status gives."""
        config = self.state.config
        r.cluster_queue = admission.cluster_queue
        a = assignment_of(admission)
        if admission.cluster_queue not in config.cluster_queues:
            self.queueing.mark_pending(
                r,
                config.reason("Misconfigured", "Inadmissible"),
                f"ClusterQueue {admission.cluster_queue} doesn't exist",
            )
            return
        self.reserve(r, a)
        if r.phase is Phase.RESERVED:
            given = {c.name: c.state for c in r.wl.admission_checks}
            reserved_only = _reserved_only(r.wl)
            for check in r.checks:
                r.checks[check] = given.get(check, "Pending") if reserved_only else "Ready"
            if all(state == "Ready" for state in r.checks.values()):
                self.admit(r)
        self.apply_stop_policy(r)

    def apply_stop_policy(self, r: WorkloadRecord) -> None:
        """A stopped queue's hold on what `r` holds (Kueue's workload controller): quota only
        reserved (admission checks pending) is given back under Hold and HoldAndDrain; an
        admitted workload is evicted under HoldAndDrain."""
        config = self.state.config
        if r.phase is Phase.RESERVED:
            stopped = config.stop_reason(r.cluster_queue, r.local_queue)
            if stopped is not None:
                self.unreserve(r, stopped)
        elif r.phase is Phase.ADMITTED:
            drain = config.drain_reason(r.cluster_queue, r.local_queue)
            if drain is not None:
                self.evict(r, reason=drain[0], message=drain[1])

    def unreserve(self, r: WorkloadRecord, why: tuple[str, str]) -> None:
        """Give back quota that `r` reserved but was not admitted with; it queues again."""
        self.release(r)
        r.assignment = None
        r.checks = {}
        r.drop_conditions(ADMITTED)
        self.queueing.enqueue(r)
        self.queueing.mark_pending(r, *why)

    # --- quota given back ----------------------------------------------------------------

    def preempt(self, preemptor: WorkloadRecord, victims: Victims) -> None:
        state = self.state
        for key in victims.targets:
            victim = state.records[key]
            if victim.phase is Phase.EVICTING:
                continue  # already being evicted for this preemptor: never twice
            reason = victims.reasons[key]
            message = preemption_message(preemptor, victim, reason, state.config.tree)
            victim.set_condition(PREEMPTED, True, reason, message)
            state.emit(EventType.PREEMPTED, victim, reason, message, by=preemptor.key)
            self.evict(victim, reason=PREEMPTED, message=message, by=preemptor.key)

    def evict(
        self,
        r: WorkloadRecord,
        *,
        reason: str,
        message: str,
        by: str = "",
        deactivate: bool = False,
    ) -> None:
        state = self.state
        r.reset_checks()
        r.set_condition(EVICTED, True, reason, message)
        self._unreserve(r, message)
        r.evicted = True
        r.evicted_by = WorkloadKey(by) if by else None
        state.usage.touch(r.cluster_queue)  # a workload being evicted is no one else's victim
        strategy = state.config.kueue.wait_for_pods_ready.requeuing_strategy
        # Kueue's queue order: by the eviction's time after an admission check's Retry and a
        # PodsReady timeout under requeuingStrategy Eviction, else by creation, so work that
        # waited behind it goes first.
        by_eviction = reason == ADMISSION_CHECK or (
            reason == PODS_READY_TIMEOUT and strategy.timestamp == "Eviction"
        )
        r.queue_ts = state.now_s if by_eviction else r.created_s
        if reason == PODS_READY_TIMEOUT:
            # Kueue's UpdateRequeueState: the back-off counts from the eviction, not from when
            # the pods are gone (a rebuild replays this with the `evicted` event's time); a
            # check's Retry that asked for a later requeueAt keeps it.
            end_s = backoff_end_s(r.requeue_count, state.now_s, strategy)
            r.requeue_at_s = later(r.requeue_at_s, end_s)
        state.emit(EventType.EVICTED, r, reason, message, by=by)
        if deactivate:
            self.release(r)
            self.deactivate(r)
            state.emit(EventType.DEACTIVATED, r, reason, message)
            return
        if state.hold_quota_until_stopped:
            r.phase = Phase.EVICTING
            return
        self.release(r)
        self.after_eviction(r)

    def _unreserve(self, r: WorkloadRecord, message: str) -> None:
        """QuotaReserved False at an eviction, and Admitted as Kueue's SyncAdmittedCondition
        syncs it: False (NoReservation) once it was admitted, or always with
        UnadmittedWorkloadsObservability on; a workload never admitted has none with it off."""
        kueue = self.state.config.kueue
        said = unreserved(
            self.state.config.reason("PendingEvaluation", "Pending"),
            message,
            checks_pending=bool(r.checks) and not kueue.granular_pending_reasons,
        )
        admitted = r.conditions.get(ADMITTED)
        if kueue.granular_pending_reasons or (admitted is not None and admitted.status == "True"):
            for condition in said:
                r.set_condition(*condition)
            return
        r.drop_conditions(ADMITTED)
        r.set_condition(*said[0])

    def after_eviction(self, r: WorkloadRecord) -> None:
        """Requeue an evicted workload, after a back-off when pods were not ready in time."""
        r.assignment = None
        r.checks = {}
        r.pods_ready = False
        r.pods_ready_deadline_s = None
        evicted = r.conditions.get(EVICTED)
        reason, message = (evicted.reason, evicted.message) if evicted is not None else ("", "")
        if not r.wl.active:  # deactivated (kueuectl stop workload): it waits to be resumed
            r.set_condition(REQUEUED, False, reason, message)  # Kueue's job reconciler
            self.deactivate(r)
            return
        # Set at the eviction: the back-off of a PodsReady timeout, a check's Retry with
        # requeueAfterSeconds. Kueue queues it at the later of that and the quota's release.
        requeue_at_s, r.requeue_at_s = r.requeue_at_s, None
        if requeue_at_s is not None and requeue_at_s > self.state.now_s:
            self.wait_until(r, requeue_at_s, reason=reason, message=message)
            return
        r.pending_message = ""
        self.queueing.enqueue(r)
        # Kueue: True at once after a preemption; after a PodsReady timeout or a check's Retry
        # whose wait ended while the pods stopped, its back-off is over at once.
        if reason in BACKING_OFF:
            r.set_condition(REQUEUED, True, BACKOFF_FINISHED, BACKOFF_FINISHED_MESSAGE)
            self.state.emit(EventType.REQUEUED, r, BACKOFF_FINISHED, "Requeued after back-off")
            return
        r.set_condition(REQUEUED, True, reason, message)
        self.state.emit(EventType.REQUEUED, r, "Evicted", "Requeued after eviction")

    def time_out(self, r: WorkloadRecord) -> None:
        """waitForPodsReady's timeout (Kueue's reconcileNotReadyTimeout): evicted
        (PodsReadyTimeout), to back off once its pods are gone; or, when one more requeue
        would pass backoffLimitCount, deactivated instead (evicted, reason Deactivated with
        the cause RequeuingLimitExceeded)."""
        limit = self.state.config.kueue.wait_for_pods_ready.requeuing_strategy.backoff_limit_count
        if limit is not None and r.requeue_count + 1 > limit:
            r.wl = msgspec.structs.replace(r.wl, active=False)
            self.evict(r, reason=REQUEUING_LIMIT_EXCEEDED, message=REQUEUING_LIMIT_MESSAGE)
            return
        # Counted at the eviction, as Kueue's requeueState.count: a replica rebuilt from the
        # stream counts the PodsReadyTimeout evictions it replays (admission/ledger.py).
        r.requeue_count = count_after_eviction(r.requeue_count, PODS_READY_TIMEOUT)
        self.evict(r, reason=PODS_READY_TIMEOUT, message=f"Exceeded the PodsReady timeout {r.key}")

    def wait_until(self, r: WorkloadRecord, at_s: float, *, reason: str, message: str) -> None:
        """Out of the queue until `at_s`, then requeued (BackoffFinished). Requeued False
        meanwhile, with the eviction's reason and message (Kueue's job reconciler)."""
        r.phase = Phase.BACKOFF
        r.requeue_at_s = at_s
        r.set_condition(REQUEUED, False, reason, message)
        self.state.add_timer(at_s, "requeue", r.key)

    def hold_out(self, r: WorkloadRecord, at_s: float) -> None:
        """A queued workload out of its queue until `at_s` (a check's Retry told while it
        waits for quota), then requeued as after a back-off. Its conditions stay: Kueue's
        workload controller only sets requeueAt, and its queue keeps it inadmissible."""
        self.release(r)  # off its queue, and any quota held for it as a preemptor
        r.phase = Phase.BACKOFF
        r.requeue_at_s = at_s
        self.state.add_timer(at_s, "requeue", r.key)

    def wait_longer(self, r: WorkloadRecord, at_s: float) -> None:
        """A waiting workload's back-off ends at `at_s` if that is later (a check's Retry
        told after its pods were gone); the earlier timer is no longer live."""
        if r.requeue_at_s is not None and at_s > r.requeue_at_s:
            r.requeue_at_s = at_s
            self.state.add_timer(at_s, "requeue", r.key)

    def deactivate(self, r: WorkloadRecord) -> None:
        """spec.active false: it waits for nothing (Kueue: QuotaReserved=False, Deactivated;
        its requeueState cleared, so a back-off's end never outlives it)."""
        r.phase = Phase.INACTIVE
        r.requeue_count, r.requeue_at_s = 0, None
        reason = self.state.config.reason(DEACTIVATED, "Inactive")
        self.queueing.say_waiting(r, reason, DEACTIVATED_MESSAGE)

    def finish(self, r: WorkloadRecord, *, reason: str, message: str) -> None:
        index = r.unindexed()  # counted once, finished: nothing reads the views meanwhile
        try:
            self.release(r)
            self.retire(r)
            r.phase = Phase.FINISHED
        finally:
            r.reindexed(index)
        r.set_condition(FINISHED, True, reason, message)
        self.state.emit(EventType.FINISHED, r, reason, message)

    def retire(self, r: WorkloadRecord) -> None:
        """`r` is gone (finished, deleted): its LocalQueue keeps only what its runs left."""
        book, fair = self.state.admission_usage, self.state.config.kueue.admission_fair_sharing
        if book is not None and fair is not None:
            book.retire(r.key, config=fair)

    def release(self, r: WorkloadRecord) -> None:
        """Give back whatever `r` holds and leave its queue; wake groups it may unblock."""
        state = self.state
        if r.phase is Phase.PENDING:
            self.queueing.drop_reservation(r)
            r.phase = Phase.DELETED  # off the queue; the caller sets the real phase
            return
        if not r.holds_quota:
            return
        freed = state.usage.unhold(r)
        book, fair = state.admission_usage, state.config.kueue.admission_fair_sharing
        if book is not None and fair is not None:  # a no-op when its fact stopped it already
            book.stop(r.key, at_s=state.now_s, config=fair)
        self._wake(r, freed)

    def reclaim(self, r: WorkloadRecord, reclaimable: Mapping[str, int]) -> None:
        """`r` gives back the quota of `reclaimable` pods (or takes back what it gave, when
        fewer are reclaimable now): a holder's usage follows at once and what waits for the
        quota freed is retried; a pending workload asks for the pods it still needs."""
        pending, holds = r.phase is Phase.PENDING, r.holds_quota
        if pending:
            self.release(r)  # off its group: its shape changes
        before = self.state.usage.unhold(r) if holds else {}
        r.reclaimable = reclaimable
        r.shape = shape_of(r)
        if pending:
            self.queueing.enqueue(r)
        if not holds:
            return
        self.state.usage.hold(r)
        after = r.usage
        book, fair = self.state.admission_usage, self.state.config.kueue.admission_fair_sharing
        if book is not None and fair is not None:  # its LocalQueue's usage follows (Kueue)
            book.resize(r.key, after, at_s=self.state.now_s, config=fair)
        freed = {fr: n - after.get(fr, 0) for fr, n in before.items() if n > after.get(fr, 0)}
        self._wake(r, freed)

    def _wake(self, r: WorkloadRecord, freed: Mapping[FlavorResource, int]) -> None:
        """Retry the groups parked on what `r`'s ClusterQueue just freed."""
        state = self.state
        queue = state.queues.get(r.cluster_queue)
        if queue is None:
            return
        tree = queue.tree
        if tree.tournament is not None:
            tree.tournament.touch(queue)  # lower shares on its path: keys there may drop
        if state.deferred is not None:  # freed for a preemptor: see Heads._preempt_for
            for fr, amount in freed.items():
                state.deferred[fr] = state.deferred.get(fr, 0) + amount
            return
        for fr, amount in freed.items():
            for group in tree.release(fr, amount):
                self.queueing.retry(group)

    def drop(self, r: WorkloadRecord) -> None:
        """Remove a record that no longer queues or holds anything from every index.

        A stale entry in its group's heap (a workload deleted while pending) keeps the record
        only until the group's head passes it; `group` is cleared so that it never counts.
        """
        state = self.state
        self.queueing.drop_reservation(r)
        state.attempts.forget(r.key)
        state.fair_keys.forget(r.key)
        del state.records[r.key]
        state.index.remove(r)
        state.awaiting_victims.discard(r.key)
        r.group = None
        if self.routing is not None:
            self.routing.forget(r.key)

    # --- routing (docs/routing.md; the decisions are RoutingControl's) -------------------

    def take(self, r: WorkloadRecord, take: Take) -> None:
        """Put `r` on the option routing chose and say so; a move leaves `r.group` None for the
        caller to enqueue it (through the option's LocalQueue, keeping its key and order)."""
        state = self.state
        before = state.config.local_queues.get(r.local_queue)
        if take.moves:
            self.queueing.drop_reservation(r)
            option = take.option
            r.wl = msgspec.structs.replace(
                r.wl, queue_name=option.queue_name, pod_sets=option.pod_sets
            )
            r.local_queue = local_queue_of(r.wl.meta.namespace, option.queue_name)
            r.shape = shape_of(r)
            r.group = None
            state.version += 1  # cached views group records by queue
        after = state.config.local_queues.get(r.local_queue)
        state.emit(
            EventType.ROUTED,
            r,
            take.reason,
            take.message,
            from_queue=before.cluster_queue if before is not None else "",
            to_queue=after.cluster_queue if after is not None else "",
        )

    def reroute(self, routing: RoutingControl) -> None:
        """`fastest`: carry out what it decides for the pending workloads it routes."""
        for r, take in routing.reroute(self.state):
            old = r.group
            self.take(r, take)
            if take.moves:  # off its old queue, onto the new one
                self.queueing.enqueue(r)
                if old is not None and old.head() is not None:
                    self.queueing.retry(old)  # its head changed

    # --- timers and waitForPodsReady ------------------------------------------------------

    def admission_blocked(self) -> bool:
        """waitForPodsReady.blockAdmission: nothing new starts while pods are still starting."""
        state = self.state
        wait = state.config.kueue.wait_for_pods_ready
        if not (wait.enable and wait.block_admission):
            return False
        return any(
            r.phase is Phase.ADMITTED and not r.pods_ready
            for held in state.usage.holders.values()
            for r in held.values()
        )

    def readiness_lost(self, r: WorkloadRecord) -> None:
        """A pod of `r`, admitted with every pod ready, is not ready any more (Kueue's job
        reconciler): PodsReady False, WaitForRecovery; with waitForPodsReady.recoveryTimeout,
        evicted (PodsReadyTimeout) unless every pod is ready again before it has passed."""
        state = self.state
        wait = state.config.kueue.wait_for_pods_ready
        if not (wait.enable and r.phase is Phase.ADMITTED and r.pods_ready):
            return
        r.pods_ready = False
        r.set_condition(PODS_READY, False, WAIT_FOR_RECOVERY, WAIT_FOR_RECOVERY_MESSAGE)
        if wait.recovery_timeout_seconds is not None:
            r.pods_ready_deadline_s = state.now_s + wait.recovery_timeout_seconds
            state.add_timer(r.pods_ready_deadline_s, "pods-ready", r.key)

    def timer_live(self, kind: str, key: WorkloadKey, at: float) -> bool:
        r = self.state.records.get(key)
        if r is None:
            return False
        if kind == "requeue":
            return r.phase is Phase.BACKOFF and r.requeue_at_s == at
        return r.phase is Phase.ADMITTED and r.pods_ready_deadline_s == at

    def fire_timers(self) -> None:
        """Requeue workloads whose back-off is over; evict those whose pods were not ready in
        time (waitForPodsReady: after admission, or after readiness was lost)."""
        state = self.state
        while state.timers and state.timers[0][0] <= state.now_s:
            at, _, kind, key = heapq.heappop(state.timers)
            if not self.timer_live(kind, key, at):
                continue
            r = state.records[key]
            if kind == "requeue":
                r.requeue_at_s = None
                r.pending_message = ""
                words = requeued_words(r, BACKOFF_FINISHED)
                if words is not None:
                    r.set_condition(REQUEUED, True, *words)
                self.queueing.enqueue(r)
                state.emit(EventType.REQUEUED, r, BACKOFF_FINISHED, "Requeued after back-off")
            else:
                self.time_out(r)


def requeued_words(r: WorkloadRecord, why: str) -> tuple[str, str] | None:
    """Requeued True's (reason, message) when `r` is queued again by a `requeued` of `why`
    (Reactivated, or BackoffFinished at a wait's end), as Kueue's workload controller words
    it from the Requeued condition it finds (`conditions.requeued_when_queued`); None: as it
    is."""
    was = r.conditions.get(REQUEUED)
    if was is None:
        return None
    return requeued_when_queued(was.status, was.reason, was.message, why)


def _reserved_only(wl: Workload) -> bool:
    """True if the status says QuotaReserved but not Admitted."""
    states = {c.type: c.status for c in wl.conditions}
    return states.get(QUOTA_RESERVED) == "True" and states.get(ADMITTED) != "True"


def assignment_of(admission: Admission) -> Assignment:
    """The usage an admission holds, as the engine accounts it."""
    usage: dict[tuple[str, str], int] = {}
    for ps in admission.pod_set_assignments:
        for resource, amount in ps.resource_usage.items():
            fr = (ps.flavors.get(resource, ""), resource)
            usage[fr] = usage.get(fr, 0) + amount
    return Assignment(
        pod_sets=admission.pod_set_assignments, usage=usage, mode=Mode.FIT, borrowing=0
    )
