"""The admission engine: Kueue's semantics as a pure state machine.

Callers (the simulator, the admission service) feed it facts with the time they happened
(`submit`, `finish`, `set_admission_check`, `pods_ready`, `apply`) and ask it to decide
(`schedule`). Every call returns the `Event`s it caused, in order. No I/O, no clock.
A long-running caller `forget`s workloads that are done, so memory follows the live ones.

Differs from Kueue: one `schedule()` admits everything that fits, in the order Kueue's cycles
would, instead of one head per ClusterQueue per cycle.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from muster.api.model import (
    Admission,
    AdmissionCheckState,
    ApiObject,
    Condition,
    KueueConfig,
    Workload,
    WorkloadKey,
)
from muster.api.wellknown import PREEMPTED, REQUESTS_REFUSED
from muster.core.attempt import Attempts
from muster.core.config import NAMESPACE_MISMATCH, Configuration
from muster.core.events import Event, EventType
from muster.core.fairshare import ZERO, borrows_on, dominant_share, with_usage
from muster.core.flavors import Assignment, Mode
from muster.core.preemption import Victims, preemption_message
from muster.core.queues import (
    SET_ASIDE,
    Park,
    PendingGroup,
    QueueRuntime,
    Reservation,
    TreeRuntime,
)
from muster.core.quota import FlavorResource, tree_id
from muster.core.records import Phase, WorkloadRecord
from muster.core.routing import RoutingSettings
from muster.core.routing.control import RoutingControl, Take
from muster.core.status import ClusterQueueStatus, LocalQueueStatus, PendingWorkload
from muster.core.tournament import FairKeys, Tournament
from muster.core.visibility import (
    QuotaRow,
    cluster_queue_status,
    local_queue_status,
    pending_in_order,
    quota_rows,
)

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"
WAITING_FOR_VICTIMS = "WaitingForPreemptedWorkloads"
PENDING_PREEMPTION = (
    ". Pending the preemption of"  # Kueue: "<why>. Pending the preemption of N workload(s)"
)
NO_LONGER_FITS = "Workload no longer fits after processing another workload"  # Kueue's words
DEACTIVATED = "Deactivated"
DEACTIVATED_MESSAGE = "The workload is deactivated"
_DONE = frozenset({Phase.FINISHED, Phase.DELETED, Phase.INACTIVE})


class Engine:
    """Queues, quota and decisions for a set of cohort trees.

    `hold_quota_until_stopped`: when False (the quota-only simulator), an evicted workload
    gives its quota back at once; when True (services), only after `stopped()` confirms that
    its pods are gone. `routing`: route workloads with alternatives (docs/routing.md); None
    (the default) keeps every workload on its declared queue whatever its ClusterQueue says.
    """

    def __init__(
        self,
        objects: Iterable[ApiObject] = (),
        *,
        config: KueueConfig | None = None,
        hold_quota_until_stopped: bool = False,
        routing: RoutingSettings | None = None,
    ) -> None:
        self.config = Configuration(config or KueueConfig())
        self.hold_quota_until_stopped = hold_quota_until_stopped
        # Every workload known, in arrival order (a resubmission after deletion moves to the end).
        self.records: dict[WorkloadKey, WorkloadRecord] = {}
        self.trees: dict[str, TreeRuntime] = {}
        self.queues: dict[str, QueueRuntime] = {}
        self.timers: list[tuple[float, int, str, WorkloadKey]] = []
        self.seq = 0
        self.now_s = 0.0
        self.events: list[Event] = []
        self.preempted_this_round: set[WorkloadKey] = set()
        # Restored as waiting for its victims: its next try parks it instead of preempting.
        self.awaiting_victims: set[WorkloadKey] = set()
        self.version = 0  # bumped by every call that may change state; keys cached views
        self.routing = RoutingControl(routing) if routing is not None else None
        self.attempts = Attempts(self.config, self.records)
        self.fair_keys = FairKeys(self.config, self.attempts)
        self.reserving = False  # once a preemptor has held quota (services), reservations count
        # While a preemptor takes what its victims free at once: what they freed, per resource.
        self._deferred: dict[FlavorResource, int] | None = None
        self._by_queue: (
            tuple[int, dict[str, list[WorkloadRecord]], dict[str, list[WorkloadRecord]]] | None
        ) = None
        for obj in objects:
            self.config.put(obj)
        self._rebuild()

    # --- facts ---------------------------------------------------------------------------

    def apply(self, obj: ApiObject, *, now_s: float) -> list[Event]:
        """Create or replace a configuration object (flavor, queue, cohort, class, namespace)."""
        self.now_s = now_s
        self.config.put(obj)
        self._rebuild()
        self._apply_stop_policies()
        return self._take_events()

    def remove(self, kind: str, name: str, *, namespace: str = "", now_s: float) -> list[Event]:
        """Delete a configuration object. Workloads it served wait again with the reason (a
        LocalQueue or ClusterQueue that no longer exists); those holding quota keep it."""
        self.now_s = now_s
        if self.config.remove(kind, name, namespace):
            self._rebuild()
        return self._take_events()

    def submit(self, wl: Workload, *, now_s: float) -> list[Event]:
        """A workload arrives. If `wl.admission` is set it arrives admitted, holding that quota."""
        self.now_s = now_s
        old = self.records.get(wl.key)
        if old is not None and old.phase is not Phase.DELETED:
            return []  # a redelivered submission changes nothing
        self.seq += 1
        r = WorkloadRecord(wl, seq=self.seq, priority=self.config.priority_of(wl), now_s=now_s)
        r.shape = _shape_of(r)
        if old is not None:
            self._drop(old)  # deleted before: the new one arrives last
        self.records[r.key] = r
        if not wl.active:
            self._deactivate(r)
        elif wl.admission is not None:
            self._arrive_admitted(r, wl.admission)
        else:
            take = self.routing.arrive(self, r) if self.routing is not None else None
            if take is not None:
                self._take(r, take)
            self._enqueue(r)
        return self._take_events()

    def finish(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        """The workload completed: it releases its quota and leaves the queues."""
        self.now_s = now_s
        r = self.records.get(key)
        if r is None or r.phase in (Phase.FINISHED, Phase.DELETED):
            return []
        self._release(r)
        r.phase = Phase.FINISHED
        r.set_condition(FINISHED, True, "Succeeded", "Job finished successfully")
        self._emit(EventType.FINISHED, r, "Succeeded", "Job finished successfully")
        return self._take_events()

    def delete(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        """The workload was deleted: it releases its quota and leaves the queues."""
        self.now_s = now_s
        r = self.records.get(key)
        if r is None or r.phase is Phase.DELETED:
            return []
        self._release(r)
        r.phase = Phase.DELETED
        return self._take_events()

    def evict(self, key: WorkloadKey, *, reason: str, message: str, now_s: float) -> list[Event]:
        """Evict a workload holding quota for a reason from outside (gang placement gave up).

        Reports Evicted; with hold_quota_until_stopped it keeps its quota until `stopped()`,
        otherwise it releases it and is requeued at once (Requeued). A workload that holds no
        quota, or is already being evicted, is left alone.
        """
        self.now_s = now_s
        r = self.records.get(key)
        if r is None or not r.holds_quota or r.phase is Phase.EVICTING:
            return []
        self._evict(r, reason=reason, message=message)
        return self._take_events()

    def refuse_route(self, key: WorkloadKey, *, message: str, now_s: float) -> list[Event]:
        """The cluster will not run `key` with the requests of the alternative it was admitted
        through (docs/routing.md, "On Kubernetes"): it goes back to its declared queue for good
        (Routed, reason RequestsRefused) and is evicted from the alternative's quota.

        A workload not holding quota on an alternative is left alone.
        """
        self.now_s = now_s
        r = self.records.get(key)
        if r is None or self.routing is None or not r.holds_quota or r.phase is Phase.EVICTING:
            return []
        take = self.routing.refuse(key, message=message)
        if take is None:
            return []
        # Moved first: an eviction that releases at once requeues it on the declared queue.
        # Its quota is the alternative's until released (it follows `r.cluster_queue`).
        self._take(r, take)
        self._evict(r, reason=REQUESTS_REFUSED, message=message)
        return self._take_events()

    def forget(self, key: WorkloadKey) -> None:
        """Drop a Finished, Deleted or Inactive workload's record and everything indexing it.

        Afterwards the engine no longer knows `key`: its views raise KeyError, `phase` is None,
        and a later `submit` of the same key is a new workload (the caller dedupes). A workload
        that is pending, backing off or holding quota is not forgotten (a no-op): forgetting it
        would lose queue positions or quota accounting.
        """
        r = self.records.get(key)
        if r is None or r.phase not in _DONE:
            return
        self._drop(r)
        self.version += 1

    def set_active(self, key: WorkloadKey, active: bool, *, now_s: float) -> list[Event]:
        """spec.active changed (kueuectl's stop and resume workload).

        Deactivated: a pending (or backing-off) workload leaves its queue; one holding quota is
        evicted (reason Deactivated) and, once stopped, stays inactive instead of requeueing.
        Reactivated: an inactive workload, whatever deactivated it, is queued again (Requeued,
        reason Reactivated). A finished or deleted workload is left alone.
        """
        self.now_s = now_s
        r = self.records.get(key)
        if r is None or r.phase in (Phase.FINISHED, Phase.DELETED):
            return []
        r.wl = msgspec.structs.replace(r.wl, active=active)
        if active and r.phase is Phase.INACTIVE:
            r.requeue_count = 0
            r.pending_message = ""
            r.conditions.pop(EVICTED, None)
            r.set_condition(REQUEUED, True, "Reactivated", "The workload was reactivated")
            self._enqueue(r)
            if r.group is not None:  # its group may be parked with no head since it left
                self._retry(r.group)
            self._emit(EventType.REQUEUED, r, "Reactivated", "The workload was reactivated")
        elif not active and r.phase in (Phase.PENDING, Phase.BACKOFF):
            self._release(
                r
            )  # off its queue (and any reservation); a back-off's timer no longer fires
            self.awaiting_victims.discard(r.key)
            self._deactivate(r)
        elif not active and r.holds_quota and r.phase is not Phase.EVICTING:
            self._evict(r, reason="Deactivated", message="The workload is deactivated")
        return self._take_events()

    def stopped(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        """An evicted workload's pods are gone: release its quota and requeue it."""
        self.now_s = now_s
        r = self.records.get(key)
        if r is None or r.phase is not Phase.EVICTING:
            return []
        self._release(r)
        self._after_eviction(r)
        return self._take_events()

    def set_admission_check(
        self,
        key: WorkloadKey,
        check: str,
        state: str,
        *,
        message: str = "",
        requeue_after_s: float | None = None,
        now_s: float,
    ) -> list[Event]:
        """An admission check controller reports Ready, Retry, Rejected or Pending.

        As in Kueue's workload controller, Retry and Rejected count for as long as the workload
        holds quota, admitted or not: Retry evicts it, to queue again once `requeue_after_s`
        (the check's requeueAfterSeconds) has passed; Rejected deactivates it, after its pods
        stop when it was admitted."""
        self.now_s = now_s
        r = self.records.get(key)
        if r is None or r.phase not in (Phase.RESERVED, Phase.ADMITTED) or check not in r.checks:
            return []
        r.checks[check] = state
        detail = f'"{check}" ({message})' if message else f'"{check}"'
        why = f"AdmissionCheck in {state} state: {detail}"  # Kueue's wording
        if state == "Rejected":
            deactivated = f"The workload is deactivated due to {why}"
            if r.phase is Phase.RESERVED:  # nothing runs yet: its quota goes back at once
                self._evict(r, reason="AdmissionCheck", message=deactivated, deactivate=True)
            else:
                r.wl = msgspec.structs.replace(r.wl, active=False)
                self._evict(r, reason="DeactivatedDueToAdmissionCheck", message=deactivated)
        elif state == "Retry":
            r.requeue_at_s = now_s + requeue_after_s if requeue_after_s else None
            self._evict(r, reason="AdmissionCheck", message=f"Evicted due to {why}")
        elif r.phase is Phase.RESERVED and all(s == "Ready" for s in r.checks.values()):
            self._admit(r)
        return self._take_events()

    def pods_ready(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        """All pods of an admitted workload are ready (waitForPodsReady)."""
        self.now_s = now_s
        r = self.records.get(key)
        if r is None or r.phase is not Phase.ADMITTED or r.pods_ready:
            return []
        r.pods_ready = True
        r.pods_ready_deadline_s = None
        r.requeue_count = 0
        if self.config.kueue.wait_for_pods_ready.enable:
            r.set_condition(PODS_READY, True, "PodsReady", "All pods reached readiness")
        return self._take_events()

    # --- recorded decisions (state rebuild) -----------------------------------------------
    # A restarted service replays the decisions it published before, in stream order; these
    # put the engine back where it was without deciding or reporting anything again.

    def restore_reserved(
        self, key: WorkloadKey, admission: Admission, *, checks: Sequence[str], now_s: float
    ) -> None:
        """Quota was reserved for `key` as recorded; `checks` were still to pass."""
        r = self.records.get(key)
        if r is None or r.holds_quota:
            return
        self.now_s = now_s
        r.cluster_queue = admission.cluster_queue
        r.assignment = _assignment_of(admission)
        r.phase = Phase.RESERVED
        r.reserved_at_s = now_s
        r.evicted = False
        r.pending_message = ""
        self.config.hold(r)
        r.set_condition(
            QUOTA_RESERVED,
            True,
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {r.cluster_queue}",
        )
        r.conditions.pop(EVICTED, None)
        r.conditions.pop(PREEMPTED, None)
        r.checks = dict.fromkeys(checks, "Pending")
        if self.routing is not None:
            self.routing.settle(key)
        self._take_events()

    def restore_admitted(self, key: WorkloadKey, *, now_s: float) -> None:
        r = self.records.get(key)
        if r is None or r.phase is not Phase.RESERVED:
            return
        r.checks = dict.fromkeys(r.checks, "Ready")
        self.now_s = now_s
        self._admit(r)
        self._take_events()

    def restore_evicted(
        self, key: WorkloadKey, *, reason: str, message: str, now_s: float, by: str = ""
    ) -> None:
        """The recorded eviction of `key` (for preemptor `by`, when known); with
        hold_quota_until_stopped it keeps its quota until `stopped()`."""
        r = self.records.get(key)
        if r is None or not r.holds_quota or r.phase is Phase.EVICTING:
            return
        self.now_s = now_s
        self._evict(r, reason=reason, message=message, by=by)
        self._take_events()

    def restore_pending(self, key: WorkloadKey, *, reason: str, message: str) -> None:
        """The recorded pending reason, so that a rebuild does not announce it again.

        A workload recorded as having only reserved quota gives it back (a stopped queue took
        it). A preemptor recorded as waiting for its victims to stop (reason
        WaitingForPreemptedWorkloads, or Pending with Kueue's "Pending the preemption of"
        message when pending reasons are not granular) does not preempt again: as on the live
        path, it waits, keeping this reason, until quota is released.
        """
        r = self.records.get(key)
        if r is not None and r.phase is Phase.RESERVED:
            self._unreserve(r, (reason, message))
            self._take_events()
            return
        if r is None or r.phase is not Phase.PENDING:
            return
        r.set_condition(QUOTA_RESERVED, False, reason, message)
        r.pending_message = message
        if reason == WAITING_FOR_VICTIMS or PENDING_PREEMPTION in message:
            self.awaiting_victims.add(key)

    def restore_routed(self, key: WorkloadKey, *, queue_name: str) -> None:
        """The recorded routing of `key` to LocalQueue `queue_name` (state rebuild): it moves
        there without deciding or reporting anything."""
        r = self.records.get(key)
        if r is None or r.phase is not Phase.PENDING or self.routing is None:
            return
        take = self.routing.restore(key, queue_name=queue_name)
        if take is None:
            return
        self._take(r, take)
        self._enqueue(r)
        self._take_events()

    def holds_quota(self, key: WorkloadKey) -> bool:
        r = self.records.get(key)
        return r is not None and r.holds_quota

    def phase(self, key: WorkloadKey) -> str | None:
        """The workload's Phase value ("Pending", "Admitted", "Finished", ...), or None when
        the engine does not know it (never submitted, or forgotten)."""
        r = self.records.get(key)
        return None if r is None else r.phase.value

    # --- decisions -----------------------------------------------------------------------

    def schedule(self, *, now_s: float) -> list[Event]:
        """Admit everything that fits now, preempting where the policies allow.

        Also fires timers that are due (requeue back-off, waitForPodsReady timeouts).
        """
        self.now_s = now_s
        self._fire_timers()
        self.preempted_this_round = set()
        if not self._admission_blocked():
            if self.routing is not None:
                self._reroute(self.routing)
                for group in self.routing.release(self):
                    self._retry(group)
            for name in sorted(self.trees):
                self._schedule_tree(self.trees[name])
        return self._take_events()

    def next_wakeup_s(self) -> float | None:
        """The earliest time a timer needs `schedule()` to run, or None."""
        while self.timers:
            at, _, kind, key = self.timers[0]
            if self._timer_live(kind, key, at):
                return at
            heapq.heappop(self.timers)
        return None

    # --- views ---------------------------------------------------------------------------

    def workload(self, key: WorkloadKey) -> Workload:
        """The workload as it stands: spec as submitted, status (admission, conditions) current."""
        r = self.records[key]
        # Kueue keeps status.admission on a finished workload; eviction clears it.
        admission = self.admission(key)
        conditions = r.conditions
        group = r.group
        if r.is_queued and group is not None and group.shape and group.why is not None:
            # BestEffortFIFO: the members of a parked group wait for the reason its head does,
            # as Kueue would have told each of them after trying it.
            reason, message = group.why
            waiting = Condition(type=QUOTA_RESERVED, status="False", reason=reason, message=message)
            conditions = {**conditions, QUOTA_RESERVED: waiting}
        return msgspec.structs.replace(
            r.wl,
            priority=r.priority,
            admission=admission,
            conditions=tuple(conditions.values()),
            admission_checks=tuple(
                AdmissionCheckState(name=name, state=state)  # type: ignore[arg-type]
                for name, state in sorted(r.checks.items())
            ),
            active=r.phase is not Phase.INACTIVE,
        )

    def admission(self, key: WorkloadKey) -> Admission | None:
        """The workload's current (or, once finished, last) admission; cheap."""
        r = self.records[key]
        if r.assignment is None or not (r.holds_quota or r.phase is Phase.FINISHED):
            return None
        return Admission(cluster_queue=r.cluster_queue, pod_set_assignments=r.assignment.pod_sets)

    def workloads(self) -> Sequence[Workload]:
        """Every workload the engine knows, in arrival order."""
        return [self.workload(k) for k, r in self.records.items() if r.phase is not Phase.DELETED]

    def required_checks(self, key: WorkloadKey) -> tuple[str, ...]:
        """Admission checks the workload needs before it is Admitted (after QuotaReserved)."""
        r = self.records[key]
        return tuple(sorted(r.checks))

    def cluster_queue_status(self, name: str) -> ClusterQueueStatus:
        return cluster_queue_status(self, name)

    def local_queue_status(self, namespace: str, name: str) -> LocalQueueStatus:
        return local_queue_status(self, namespace, name)

    def cluster_queue_names(self) -> Sequence[str]:
        return sorted(self.config.cluster_queues)

    def local_queue_keys(self) -> Sequence[tuple[str, str]]:
        """(namespace, name) of every LocalQueue, sorted."""
        return sorted(tuple(k.split("/", 1)) for k in self.config.local_queues)  # type: ignore[misc]

    def tree_of_queue(self, namespace: str, queue_name: str) -> str | None:
        """The cohort tree whose quota serves LocalQueue `namespace/queue_name` (the unit
        admission shards on), or None while the LocalQueue or its ClusterQueue is missing."""
        lq = self.config.local_queues.get(f"{namespace}/{queue_name or 'default'}")
        if lq is None or lq.cluster_queue not in self.config.tree.cluster_queues:
            return None
        return tree_id(self.config.tree.cluster_queues[lq.cluster_queue].root())

    def tree_of_cluster_queue(self, name: str) -> str | None:
        """The cohort tree ClusterQueue `name` belongs to ("cohort/<root>" or "cq/<name>"), or
        None when it does not exist."""
        node = self.config.tree.cluster_queues.get(name)
        return None if node is None else tree_id(node.root())

    def quota(self, cluster_queue: str) -> Sequence[QuotaRow]:
        """Per flavor and resource of a ClusterQueue: nominal, limits, reserved, used, available."""
        return quota_rows(self, cluster_queue)

    def pending_workloads(self, cluster_queue: str) -> Sequence[PendingWorkload]:
        """Pending workloads of a ClusterQueue in admission order, with their positions."""
        return pending_in_order(self, cluster_queue)

    # --- configuration -------------------------------------------------------------------

    def _rebuild(self) -> None:
        """Recompute trees, layouts and usage after a configuration change; requeue all."""
        holders = [r for r in self.records.values() if r.holds_quota]
        self.config.build(holders)
        self.trees = {}
        self.queues = {}
        if self.routing is not None:
            self.routing.drop_held()  # every pending workload is enqueued again below
        fair = self.config.fair_sharing_enabled
        for name in sorted(self.config.cluster_queues):
            node = self.config.tree.cluster_queues[name]
            root = node.root()
            tree = self.trees.get(tree_id(root))
            if tree is None:
                tournament = Tournament(self.fair_keys.key) if fair and root.is_cohort else None
                tree = self.trees[tree_id(root)] = TreeRuntime(tree_id(root), root, tournament)
            self.queues[name] = QueueRuntime(name, tree, node)
        for r in self.records.values():
            r.group = None
            if r.phase is Phase.PENDING:
                self._enqueue(r)

    def _apply_stop_policies(self) -> None:
        for r in list(self.records.values()):
            self._apply_stop_policy(r)

    def _apply_stop_policy(self, r: WorkloadRecord) -> None:
        """A stopped queue's hold on what `r` holds (Kueue's workload controller): quota only
        reserved (admission checks pending) is given back under Hold and HoldAndDrain; an
        admitted workload is evicted under HoldAndDrain."""
        if r.phase is Phase.RESERVED:
            stopped = self.config.stop_reason(r.cluster_queue, r.local_queue)
            if stopped is not None:
                self._unreserve(r, stopped)
        elif r.phase is Phase.ADMITTED:
            drain = self.config.drain_reason(r.cluster_queue, r.local_queue)
            if drain is not None:
                self._evict(r, reason=drain[0], message=drain[1])

    def _unreserve(self, r: WorkloadRecord, why: tuple[str, str]) -> None:
        """Give back quota that `r` reserved but was not admitted with; it queues again."""
        self._release(r)
        r.assignment = None
        r.checks = {}
        r.conditions.pop(ADMITTED, None)
        self._enqueue(r)
        self._mark_pending(r, *why)

    # --- queueing ------------------------------------------------------------------------

    def _enqueue(self, r: WorkloadRecord) -> None:
        r.phase = Phase.PENDING
        cq_name, problem = self.config.resolve_queue(r)
        if problem is not None:
            r.cluster_queue = cq_name or ""
            self._mark_pending(r, self.config.reason("Misconfigured", "Inadmissible"), problem)
            return
        r.cluster_queue = cq_name or ""
        cq = self.queues[r.cluster_queue]
        shape = r.shape if self.config.best_effort(r.cluster_queue) else b""
        if self.routing is not None and self.routing.is_routed(r.key):
            shape = b"routed:" + r.shape  # never in one group with the queue's own workloads
        group = cq.groups.get(shape)
        if group is None:
            group = cq.groups[shape] = PendingGroup(cq, shape)
        r.group = group
        old_head = group.head()
        group.push(r)
        if group.park is Park.PARKED and (old_head is None or r.order_key >= old_head.order_key):
            return  # behind a head that cannot be admitted: it cannot be either
        cq.list_group(group)
        self._list_queue(cq)

    def _retry(self, group: PendingGroup) -> None:
        """List `group` and its ClusterQueue again: its head may be admissible now."""
        group.cq.list_group(group)
        self._list_queue(group.cq)

    def _list_queue(self, cq: QueueRuntime) -> None:
        if cq.tree.tournament is not None:
            cq.tree.tournament.touch(cq)
            return
        group = cq.best_group()
        if group is None:
            return
        head = group.head()
        assert head is not None
        cq.tree.list_queue(cq, self._list_key(head))

    def _list_key(self, r: WorkloadRecord) -> tuple[object, ...]:
        """A lower bound of `r`'s `_sort_key`, known before its flavors are."""
        if self.config.fair_sharing_enabled:
            return (False, ZERO, -r.priority, r.queue_ts, r.seq)
        return (0, -r.priority, r.queue_ts, r.seq)

    def _sort_key(self, r: WorkloadRecord, a: Assignment) -> tuple[object, ...]:
        """Kueue's cycle order. Classical: the borrowing level (how high in the cohort tree the
        quota comes from), then priority, then FIFO. Fair sharing: not borrowing on what it
        asks for first, then the share of its ClusterQueue with it admitted, then priority,
        then FIFO."""
        if not self.config.fair_sharing_enabled:
            return (a.borrowing, -r.priority, r.queue_ts, r.seq)
        node = self.config.tree.cluster_queues[r.cluster_queue]
        with_usage(node, a.usage, 1)
        try:
            flag, share = borrows_on(node, a.usage), dominant_share(node)
        finally:
            with_usage(node, a.usage, -1)
        return (flag, share, -r.priority, r.queue_ts, r.seq)

    def _mark_pending(self, r: WorkloadRecord, reason: str, message: str) -> None:
        r.set_condition(QUOTA_RESERVED, False, reason, message)
        if message != r.pending_message:
            r.pending_message = message
            self._emit(EventType.PENDING, r, reason, message)

    # --- the round -----------------------------------------------------------------------

    def _schedule_tree(self, tree: TreeRuntime) -> None:
        """Try queues of one cohort tree, best first, until none has an admissible head."""
        if tree.tournament is not None:
            while (won := tree.tournament.winner(tree.root)) is not None:
                cq, nominee = won
                best = cq.best_group()
                assert best is not None
                self._try_head(tree, cq, best, nominee, None)
            return
        while True:
            nxt = tree.next_queue()
            if nxt is None:
                return
            key, cq = nxt
            group = cq.best_group()
            if group is None:
                continue
            head = group.head()
            assert head is not None
            self._try_head(tree, cq, group, head, key)

    def _try_head(
        self,
        tree: TreeRuntime,
        cq: QueueRuntime,
        group: PendingGroup,
        r: WorkloadRecord,
        listed_key: tuple[object, ...] | None,
    ) -> None:
        """Decide for head `r`; `listed_key` is the lower bound it was listed with, None when
        its turn is exact (the fair-sharing tournament)."""
        problem = self.config.admissibility(r)
        if problem is not None:
            if problem[1] == NAMESPACE_MISMATCH and not group.shape:
                self._set_aside(tree, cq, group, r, problem)
            else:
                self._drop_reservation(r)
                self._park(tree, group, r, problem, {})
            return
        held = self.routing.hold_back(self, r, group) if self.routing is not None else None
        if held is not None:
            self._drop_reservation(r)
            self._park(tree, group, r, (self.config.reason("WaitingForQuota", "Pending"), held), {})
            return
        a, victims = self.attempts.attempt(r)
        if a.mode is Mode.FIT or victims is not None:
            key = self._sort_key(r, a)
            top = tree.peek_key() if listed_key is not None else None
            if listed_key is not None and key > listed_key and top is not None and key > top:
                cq.tree.list_queue(cq, key)  # others come first now; retry in order
                return
            short = self._held_for_preemptors(tree, r, key, a, victims) if tree.reservations else {}
            if short:  # a preemptor held back keeps what it holds: its need is unchanged
                why = (self.config.reason("WaitingForQuota", "Pending"), NO_LONGER_FITS)
                self._park(tree, group, r, why, short)
                return
        if a.mode is Mode.FIT:
            self._admit_head(cq, group, r, a)
            return
        if r.key in self.awaiting_victims and a.mode is Mode.PREEMPT:
            # Restored as a preemptor whose victims stop (which they are is not recorded):
            # it waits, as it did, and preempts no one else.
            self.awaiting_victims.discard(r.key)
            self._await_victims(tree, cq, group, r, a, None)
            return
        if victims is not None and r.key not in self.preempted_this_round:
            self._preempt_for(tree, cq, group, r, a, victims)
            return
        self.awaiting_victims.discard(r.key)
        # Kueue: a workload that needs preemption but has no victim waits for quota.
        reason = a.pending_reason if a.mode is Mode.NO_FIT else "WaitingForQuota"
        if reason != "WaitingForQuota":
            self._drop_reservation(r)  # it cannot fit at all: a preemptor gives up
        # else a preemptor whose freed quota went to work ahead of it keeps what it holds
        why = (self.config.reason(reason, "Pending"), a.message)
        self._park(tree, group, r, why, self._wake_thresholds(cq.name, a))

    def _admit_head(
        self, cq: QueueRuntime, group: PendingGroup, r: WorkloadRecord, a: Assignment
    ) -> None:
        group.pop_head()
        self._reserve(r, a)
        cq.list_group(group)
        self._list_queue(cq)

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
        self.preempted_this_round.add(r.key)
        if self.hold_quota_until_stopped:
            self._preempt(r, victims)
            self._await_victims(tree, cq, group, r, a, len(victims.targets))
            return
        # The victims are gone at once: admit the preemptor now, before anything else can,
        # and wake parked work only for what is left over (most often nothing).
        deferred: dict[FlavorResource, int] = {}
        self._deferred = deferred
        try:
            self._preempt(r, victims)
            again = self.attempts.assign(r, [ps.count for ps in a.pod_sets])
            if again.mode is Mode.FIT:
                self._admit_head(cq, group, r, again)
                for fr, amount in again.usage.items():
                    deferred[fr] = deferred.get(fr, 0) - amount
            else:
                cq.list_group(group)
                self._list_queue(cq)
        finally:
            self._deferred = None
        for fr, amount in sorted(deferred.items()):
            if amount > 0:
                for woken in tree.release(fr, amount):
                    self._retry(woken)

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
        self._set_reservation(tree, r, self._sort_key(r, a), a.usage)
        if count is not None:
            reason = self.config.reason(WAITING_FOR_VICTIMS, "Pending")
            self._mark_pending(r, reason, f"{a.message}{PENDING_PREEMPTION} {count} workload(s)")
        tree.park(group, dict.fromkeys(a.short, 1))
        self._list_queue(cq)

    def _set_aside(
        self,
        tree: TreeRuntime,
        cq: QueueRuntime,
        group: PendingGroup,
        r: WorkloadRecord,
        why: tuple[str, str],
    ) -> None:
        """StrictFIFO: a head whose namespace the ClusterQueue does not select steps aside and
        the next workload becomes the head (Kueue's one exception to head-of-line blocking,
        RequeueReasonNamespaceMismatch). A configuration change tries it again."""
        self._drop_reservation(r)
        group.pop_head()
        aside = cq.groups.get(SET_ASIDE)
        if aside is None:
            aside = cq.groups[SET_ASIDE] = PendingGroup(cq, SET_ASIDE)
        r.group = aside
        aside.push(r)
        self._mark_pending(r, *why)
        aside.why = why
        tree.park(aside, {})
        cq.list_group(group)
        self._list_queue(cq)

    def _park(
        self,
        tree: TreeRuntime,
        group: PendingGroup,
        r: WorkloadRecord,
        why: tuple[str, str],
        thresholds: dict[tuple[str, str], int],
    ) -> None:
        """Park the head's group; every member of it waits for the same reason."""
        self._mark_pending(r, *why)
        group.why = why
        tree.park(group, thresholds)
        self._list_queue(group.cq)

    def _wake_thresholds(self, cq: str, a: Assignment) -> dict[tuple[str, str], int]:
        """How much must be released, per short resource, before the head is worth a retry.

        A queue that may preempt is retried on any release: victims plus freed quota may do.
        """
        if self.config.may_preempt(cq):
            return dict.fromkeys(a.shortages, 1)
        return dict(a.shortages)

    # --- quota held for preemptors (Kueue: the preemptor's usage counts in the cycle) ------

    def _held_for_preemptors(
        self,
        tree: TreeRuntime,
        r: WorkloadRecord,
        key: tuple[object, ...],
        a: Assignment,
        victims: Victims | None,
    ) -> dict[FlavorResource, int]:
        """What `a` lacks once the quota held for preemptors ahead of `r` in the cycle order
        counts as used (Kueue adds a preemptor's usage to the cycle's snapshot, so work after it
        cannot take what its victims free); {} if it still fits."""
        if not tree.reservations:
            return {}
        node = self.config.tree.cluster_queues[r.cluster_queue]
        sticky = self.config.best_effort(r.cluster_queue)
        held = tree.hold_for(r, key, cq=node, sticky=sticky)
        if not held:
            return {}
        gone = [self.records[k] for k in victims.targets] if victims is not None else []
        for v in gone:
            with_usage(self.config.tree.cluster_queues[v.cluster_queue], v.usage, -1)
        try:
            return {
                fr: val - max(0, node.available(fr))
                for fr, val in a.usage.items()
                if val > node.available(fr)
            }
        finally:
            for v in gone:
                with_usage(self.config.tree.cluster_queues[v.cluster_queue], v.usage, 1)
            tree.unhold(held)

    def _set_reservation(
        self,
        tree: TreeRuntime,
        r: WorkloadRecord,
        key: tuple[object, ...],
        usage: Mapping[FlavorResource, int],
    ) -> None:
        self._drop_reservation(r, keep=usage)
        node = self.config.tree.cluster_queues[r.cluster_queue]
        self.reserving = True
        tree.reservations[r.key] = Reservation(
            order=key, queue_order=r.order_key, node=node, usage=usage
        )

    def _drop_reservation(
        self, r: WorkloadRecord, *, keep: Mapping[FlavorResource, int] | None = None
    ) -> None:
        """Forget what `r` held as a preemptor; what is no longer held (beyond `keep`) may
        help the groups parked in its tree."""
        if not self.reserving:
            return
        queue = self.queues.get(r.cluster_queue)
        if queue is None or not queue.tree.reservations:
            return
        tree = queue.tree
        old = tree.reservations.pop(r.key, None)
        if old is None:
            return
        for fr, amount in old.usage.items():
            freed = amount - (keep or {}).get(fr, 0)
            if freed > 0:
                for group in tree.release(fr, freed):
                    self._retry(group)

    def _preempt(self, preemptor: WorkloadRecord, victims: Victims) -> None:
        for key in victims.targets:
            victim = self.records[key]
            if victim.phase is Phase.EVICTING:
                continue  # already being evicted for this preemptor: never twice
            reason = victims.reasons[key]
            message = preemption_message(preemptor, victim, reason, self.config.tree)
            victim.set_condition(PREEMPTED, True, reason, message)
            self._emit(EventType.PREEMPTED, victim, reason, message, by=preemptor.key)
            self._evict(victim, reason=PREEMPTED, message=message, by=preemptor.key)

    # --- admission and eviction ----------------------------------------------------------

    def _reserve(self, r: WorkloadRecord, a: Assignment) -> None:
        """Reserve quota; admit at once unless admission checks must pass first."""
        if self.reserving:
            self._drop_reservation(r, keep=a.usage)
        if self.config.fair_sharing_enabled:  # only the fair-sharing order caches per head
            self.attempts.forget(r.key)
            self.fair_keys.forget(r.key)
        r.assignment = a
        r.phase = Phase.RESERVED
        r.reserved_at_s = self.now_s
        r.evicted = False
        r.evicted_by = None
        r.pending_message = ""
        self.config.hold(r)
        if self.routing is not None:
            for group in self.routing.started(self, r):
                self._retry(group)
        message = f"Quota reserved in ClusterQueue {r.cluster_queue}"
        r.set_condition(QUOTA_RESERVED, True, "QuotaReserved", message)
        r.conditions.pop(EVICTED, None)
        r.conditions.pop(PREEMPTED, None)
        self._emit(EventType.QUOTA_RESERVED, r, "QuotaReserved", message)
        r.checks = dict.fromkeys(self.config.checks_for(r.cluster_queue, a), "Pending")
        if not r.checks:
            self._admit(r)

    def _admit(self, r: WorkloadRecord) -> None:
        r.phase = Phase.ADMITTED
        message = f"The workload is admitted to ClusterQueue {r.cluster_queue}"
        r.set_condition(ADMITTED, True, "Admitted", message)
        self._emit(EventType.ADMITTED, r, "Admitted", message)
        wait = self.config.kueue.wait_for_pods_ready
        if wait.enable and not r.pods_ready:
            r.pods_ready_deadline_s = self.now_s + wait.timeout_seconds
            r.set_condition(PODS_READY, False, "PodsReady", "Not all pods are ready or succeeded")
            self._timer(r.pods_ready_deadline_s, "pods-ready", r.key)

    def _arrive_admitted(self, r: WorkloadRecord, admission: Admission) -> None:
        """A workload that arrives with status.admission holds that quota from the start:
        admitted, unless its conditions say it has only reserved quota (QuotaReserved but not
        Admitted), when its admission checks start from the states its status gives."""
        r.cluster_queue = admission.cluster_queue
        a = _assignment_of(admission)
        if admission.cluster_queue not in self.config.cluster_queues:
            self._mark_pending(
                r,
                self.config.reason("Misconfigured", "Inadmissible"),
                f"ClusterQueue {admission.cluster_queue} doesn't exist",
            )
            return
        self._reserve(r, a)
        if r.phase is Phase.RESERVED:
            given = {c.name: c.state for c in r.wl.admission_checks}
            reserved_only = _reserved_only(r.wl)
            for check in r.checks:
                r.checks[check] = given.get(check, "Pending") if reserved_only else "Ready"
            if all(state == "Ready" for state in r.checks.values()):
                self._admit(r)
        self._apply_stop_policy(r)

    def _evict(
        self,
        r: WorkloadRecord,
        *,
        reason: str,
        message: str,
        by: str = "",
        deactivate: bool = False,
    ) -> None:
        r.set_condition(EVICTED, True, reason, message)
        r.conditions.pop(ADMITTED, None)
        r.set_condition(
            QUOTA_RESERVED, False, self.config.reason("PendingEvaluation", "Pending"), message
        )
        r.evicted = True
        r.evicted_by = WorkloadKey(by) if by else None
        self.config.touch(r.cluster_queue)  # a workload being evicted is no one else's victim
        # Kueue's queue order: by the eviction's time after an admission check's Retry (and a
        # PodsReady timeout under requeuingStrategy Eviction, set by the back-off), else by
        # creation, so work that waited behind it goes first.
        r.queue_ts = self.now_s if reason == "AdmissionCheck" else r.created_s
        self._emit(EventType.EVICTED, r, reason, message, by=by)
        if deactivate:
            self._release(r)
            self._deactivate(r)
            self._emit(EventType.DEACTIVATED, r, reason, message)
            return
        if self.hold_quota_until_stopped:
            r.phase = Phase.EVICTING
            return
        self._release(r)
        self._after_eviction(r)

    def _after_eviction(self, r: WorkloadRecord) -> None:
        """Requeue an evicted workload, after a back-off when pods were not ready in time."""
        r.assignment = None
        r.checks = {}
        r.pods_ready = False
        r.pods_ready_deadline_s = None
        if not r.wl.active:  # deactivated (kueuectl stop workload): it waits to be resumed
            self._deactivate(r)
            return
        evicted = r.conditions.get(EVICTED)
        if evicted is not None and evicted.reason == "PodsReadyTimeout":
            self._back_off(r)
            return
        retry_at_s, r.requeue_at_s = r.requeue_at_s, None
        if retry_at_s is not None and retry_at_s > self.now_s:  # a check's requeueAfterSeconds
            self._wait_until(r, retry_at_s, reason="AdmissionCheck")
            return
        r.pending_message = ""
        self._enqueue(r)
        self._emit(EventType.REQUEUED, r, "Evicted", "Requeued after eviction")

    def _back_off(self, r: WorkloadRecord) -> None:
        strategy = self.config.kueue.wait_for_pods_ready.requeuing_strategy
        r.requeue_count += 1
        if (
            strategy.backoff_limit_count is not None
            and r.requeue_count > strategy.backoff_limit_count
        ):
            self._deactivate(r)
            message = (
                "The workload is deactivated due to exceeding the maximum number of "
                "re-queuing retries"
            )
            r.set_condition("Requeued", False, "RequeuingLimitExceeded", message)
            self._emit(EventType.DEACTIVATED, r, "RequeuingLimitExceeded", message)
            return
        delay = min(
            strategy.backoff_base_seconds * 2 ** (r.requeue_count - 1),
            strategy.backoff_max_seconds,
        )
        if strategy.timestamp == "Eviction":
            r.queue_ts = self.now_s
        self._wait_until(r, self.now_s + delay, reason="PodsReadyTimeout")

    def _wait_until(self, r: WorkloadRecord, at_s: float, *, reason: str) -> None:
        """Out of the queue until `at_s`, then requeued (BackoffFinished)."""
        r.phase = Phase.BACKOFF
        r.requeue_at_s = at_s
        r.set_condition(REQUEUED, False, reason, f"Requeue in {at_s - self.now_s:g}s")
        self._timer(at_s, "requeue", r.key)

    def _deactivate(self, r: WorkloadRecord) -> None:
        """spec.active false: it waits for nothing (Kueue: QuotaReserved=False, Deactivated)."""
        r.phase = Phase.INACTIVE
        reason = self.config.reason(DEACTIVATED, "Inactive")
        r.set_condition(QUOTA_RESERVED, False, reason, DEACTIVATED_MESSAGE)

    def _release(self, r: WorkloadRecord) -> None:
        """Give back whatever `r` holds and leave its queue; wake groups it may unblock."""
        if r.phase is Phase.PENDING:
            self._drop_reservation(r)
            r.phase = Phase.DELETED  # off the queue; the caller sets the real phase
            return
        if not r.holds_quota:
            return
        freed = self.config.unhold(r)
        queue = self.queues.get(r.cluster_queue)
        if queue is None:
            return
        tree = queue.tree
        if tree.tournament is not None:
            tree.tournament.touch(queue)  # lower shares on its path: keys there may drop
        if self._deferred is not None:  # freed for a preemptor: see _preempt_for
            for fr, amount in freed.items():
                self._deferred[fr] = self._deferred.get(fr, 0) + amount
            return
        for fr, amount in freed.items():
            for group in tree.release(fr, amount):
                self._retry(group)

    def _drop(self, r: WorkloadRecord) -> None:
        """Remove a record that no longer queues or holds anything from every index.

        A stale entry in its group's heap (a workload deleted while pending) keeps the record
        only until the group's head passes it; `group` is cleared so that it never counts.
        """
        self._drop_reservation(r)
        self.attempts.forget(r.key)
        self.fair_keys.forget(r.key)
        del self.records[r.key]
        self.awaiting_victims.discard(r.key)
        r.group = None
        if self.routing is not None:
            self.routing.forget(r.key)

    # --- routing (docs/routing.md; the decisions are RoutingControl's) -------------------

    def _reroute(self, routing: RoutingControl) -> None:
        """`fastest`: carry out what it decides for the pending workloads it routes."""
        for r, take in routing.reroute(self):
            old = r.group
            self._take(r, take)
            if take.moves:  # off its old queue, onto the new one
                self._enqueue(r)
                if old is not None and old.head() is not None:
                    self._retry(old)  # its head changed

    def _take(self, r: WorkloadRecord, take: Take) -> None:
        """Put `r` on the option routing chose and say so; a move leaves `r.group` None for the
        caller to enqueue it (through the option's LocalQueue, keeping its key and order)."""
        before = self.config.local_queues.get(r.local_queue)
        if take.moves:
            self._drop_reservation(r)
            option = take.option
            r.wl = msgspec.structs.replace(
                r.wl, queue_name=option.queue_name, pod_sets=option.pod_sets
            )
            r.local_queue = f"{r.wl.meta.namespace}/{option.queue_name or 'default'}"
            r.shape = _shape_of(r)
            r.group = None
            self.version += 1  # cached views group records by queue
        after = self.config.local_queues.get(r.local_queue)
        self._emit(
            EventType.ROUTED,
            r,
            take.reason,
            take.message,
            from_queue=before.cluster_queue if before is not None else "",
            to_queue=after.cluster_queue if after is not None else "",
        )

    # --- timers --------------------------------------------------------------------------

    def _timer(self, at: float, kind: str, key: WorkloadKey) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (at, self.seq, kind, key))

    def _timer_live(self, kind: str, key: WorkloadKey, at: float) -> bool:
        r = self.records.get(key)
        if r is None:
            return False
        if kind == "requeue":
            return r.phase is Phase.BACKOFF and r.requeue_at_s == at
        return r.phase is Phase.ADMITTED and r.pods_ready_deadline_s == at

    def _fire_timers(self) -> None:
        while self.timers and self.timers[0][0] <= self.now_s:
            at, _, kind, key = heapq.heappop(self.timers)
            if not self._timer_live(kind, key, at):
                continue
            r = self.records[key]
            if kind == "requeue":
                r.requeue_at_s = None
                r.pending_message = ""
                r.set_condition(REQUEUED, True, "BackoffFinished", "The workload is requeued")
                self._enqueue(r)
                self._emit(EventType.REQUEUED, r, "BackoffFinished", "Requeued after back-off")
            else:
                message = f"Exceeded the PodsReady timeout {r.key}"
                self._evict(r, reason="PodsReadyTimeout", message=message)

    def _admission_blocked(self) -> bool:
        """waitForPodsReady.blockAdmission: nothing new starts while pods are still starting."""
        wait = self.config.kueue.wait_for_pods_ready
        if not (wait.enable and wait.block_admission):
            return False
        return any(
            r.phase is Phase.ADMITTED and not r.pods_ready
            for held in self.config.holders.values()
            for r in held.values()
        )

    # --- events --------------------------------------------------------------------------

    def _emit(
        self,
        type_: EventType,
        r: WorkloadRecord,
        reason: str,
        message: str,
        *,
        by: str = "",
        from_queue: str = "",
        to_queue: str = "",
    ) -> None:
        if self.routing is not None:
            self.routing.changed()
        self.events.append(
            Event(
                time=self.now_s,
                type=type_,
                object=r.key,
                reason=reason,
                message=message,
                by=by,
                from_queue=from_queue,
                to_queue=to_queue,
            )
        )

    def _take_events(self) -> list[Event]:
        self.version += 1
        events, self.events = self.events, []
        return events

    def records_by_queue(
        self,
    ) -> tuple[dict[str, list[WorkloadRecord]], dict[str, list[WorkloadRecord]]]:
        """Records grouped by ClusterQueue and by LocalQueue key, built once per state version."""
        if self._by_queue is None or self._by_queue[0] != self.version:
            by_cq: dict[str, list[WorkloadRecord]] = {}
            by_lq: dict[str, list[WorkloadRecord]] = {}
            for r in self.records.values():
                by_cq.setdefault(r.cluster_queue, []).append(r)
                by_lq.setdefault(r.local_queue, []).append(r)
            self._by_queue = (self.version, by_cq, by_lq)
        return self._by_queue[1], self._by_queue[2]


def _shape_of(r: WorkloadRecord) -> bytes:
    """What BestEffortFIFO groups by: workloads of one shape are decided alike."""
    return msgspec.json.encode((r.local_queue, r.priority, r.wl.pod_sets))


def _reserved_only(wl: Workload) -> bool:
    """True if the status says QuotaReserved but not Admitted."""
    states = {c.type: c.status for c in wl.conditions}
    return states.get(QUOTA_RESERVED) == "True" and states.get(ADMITTED) != "True"


def _assignment_of(admission: Admission) -> Assignment:
    """The usage an admission holds, as the engine accounts it."""
    usage: dict[tuple[str, str], int] = {}
    for ps in admission.pod_set_assignments:
        for resource, amount in ps.resource_usage.items():
            fr = (ps.flavors.get(resource, ""), resource)
            usage[fr] = usage.get(fr, 0) + amount
    return Assignment(
        pod_sets=admission.pod_set_assignments, usage=usage, mode=Mode.FIT, borrowing=0
    )
