"""The admission engine: Kueue's semantics as a pure state machine.

Callers (the simulator, the admission service) feed it facts with the time they happened
(`submit`, `finish`, `set_admission_check`, `pods_ready`, `apply`) and ask it to decide
(`schedule`). Every call returns the `Event`s it caused, in order. No I/O, no clock.
A long-running caller `forget`s workloads that are done, so memory follows the live ones.

The engine holds the facts and the round; what it knows is `EngineState`, one workload's
transitions are `Lifecycle`'s, where pending work waits is `Queueing`'s, and the views are
`visibility`'s (docs/adr/0002-admission-engine-split.md).

Differs from Kueue: one `schedule()` admits everything that fits, in the order Kueue's cycles
would, instead of one head per ClusterQueue per cycle.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from muster.api.model import (
    Admission,
    ApiObject,
    KueueConfig,
    LimitRange,
    ReclaimablePod,
    RuntimeClass,
    Workload,
    WorkloadKey,
)
from muster.api.wellknown import REQUESTS_REFUSED
from muster.core.check_retries import NO_RETRIES
from muster.core.conditions import (
    ADMISSION_CHECK,
    DEACTIVATED,
    DEACTIVATED_MESSAGE,
    EVICTED,
    PENDING_PREEMPTION,
    PODS_READY,
    REACTIVATED,
    REACTIVATED_MESSAGE,
    READY_MESSAGE,
    RECOVERED,
    REQUEUED,
    STARTED,
    SUCCEEDED,
    SUCCEEDED_MESSAGE,
    WAIT_FOR_RECOVERY,
    WAITING_FOR_VICTIMS,
)
from muster.core.config import Configuration
from muster.core.events import Event, EventType
from muster.core.heads import Heads
from muster.core.lifecycle import Lifecycle, assignment_of, requeued_words
from muster.core.limit_ranges import NO_RUNTIME_CLASSES, adjusted_workload, resource_problem
from muster.core.queueing import Queueing
from muster.core.queues import TreeRuntime
from muster.core.reclaim import NONE, reclaimable_of
from muster.core.records import NO_ENDS, Phase, WorkloadRecord
from muster.core.requeue_state import (
    later,
    reactivated_retry_end_s,
    retry_counts_waiting,
    retry_end_s,
)
from muster.core.routing import RoutingSettings
from muster.core.routing.control import RoutingControl
from muster.core.state import EngineState, shape_of
from muster.core.usage import Usage
from muster.core.visibility import EngineViews

# Callers spell the engine's reasons as it does (the gateway's workload book).
__all__ = ["DEACTIVATED", "DEACTIVATED_MESSAGE", "Engine"]

_DONE = frozenset({Phase.FINISHED, Phase.DELETED, Phase.INACTIVE})
# Without quota to decide on (evicted, its pods stopping or gone; queued, backing off or
# inactive), what a check tells is kept as Kueue's status keeps it (`set_admission_check`).
_WAITING = frozenset({Phase.EVICTING, Phase.BACKOFF, Phase.PENDING, Phase.INACTIVE})
# Where a check's Retry moves its requeueAt later: holding quota, its pods stopping or not.
_DECIDING_OR_STOPPING = frozenset({Phase.RESERVED, Phase.ADMITTED, Phase.EVICTING})


class Engine(EngineViews):
    """Queues, quota and decisions for a set of cohort trees.

    `hold_quota_until_stopped`: when False (the quota-only simulator), an evicted workload
    gives its quota back at once; when True (services), only after `stopped()` confirms that
    its pods are gone. `routing`: route workloads with alternatives (docs/routing.md); None
    (the default) keeps every workload on its declared queue whatever its ClusterQueue says.
    `admission_fair_sharing`: order a ClusterQueue with `admissionScope` by its LocalQueues'
    usage (`core.admission_fair_sharing`); False orders it by priority and time only.
    """

    def __init__(
        self,
        objects: Iterable[ApiObject] = (),
        *,
        config: KueueConfig | None = None,
        hold_quota_until_stopped: bool = False,
        routing: RoutingSettings | None = None,
        admission_fair_sharing: bool = True,
    ) -> None:
        configuration = Configuration(config or KueueConfig())
        state = EngineState(
            configuration,
            hold_quota_until_stopped=hold_quota_until_stopped,
            admission_fair_sharing=admission_fair_sharing,
        )
        super().__init__(state)
        self.routing = RoutingControl(routing) if routing is not None else None
        self.queueing = Queueing(state, self.routing)
        self.lifecycle = Lifecycle(state, self.queueing, self.routing)
        self.heads = Heads(state, self.queueing, self.lifecycle, self.routing)
        for obj in objects:
            configuration.put(obj)
        self._stale = False  # configuration changed without a rebuild (`apply(..., defer=True)`)
        self._rebuild()

    # What callers outside core read of the state (services' metrics, sharding, routing).
    @property
    def config(self) -> Configuration:
        self.settle()
        return self.state.config

    @property
    def kueue(self) -> KueueConfig:
        """Kueue's Configuration in force (the trees are not settled to read it)."""
        return self.state.config.kueue

    @property
    def usage(self) -> Usage:
        return self.state.usage

    @property
    def records(self) -> dict[WorkloadKey, WorkloadRecord]:
        return self.state.records

    @property
    def now_s(self) -> float:
        return self.state.now_s

    @property
    def version(self) -> int:
        return self.state.version

    # --- facts ---------------------------------------------------------------------------

    def apply(
        self, obj: ApiObject, *, now_s: float, defer: bool = False, cluster: str = ""
    ) -> list[Event]:
        """Create or replace a configuration object (flavor, queue, cohort, class, namespace)
        applied from `cluster` (Namespaces are each cluster's own: `Configuration.namespaces`).

        `defer`: while the engine holds no workload (a replica replaying its history), only
        record it; the trees are rebuilt once, by `settle()` or the next call that needs them,
        instead of once per object (quadratic in the ClusterQueues).
        """
        self.state.now_s = now_s
        self.state.config.put(obj, cluster=cluster)
        self.state.index.config_changed()
        if defer and not self.state.records:
            self._stale = True
            return self.state.take_events()
        self._rebuild()
        if isinstance(obj, LimitRange):
            self._limit_ranges_changed(obj.meta.namespace, cluster=cluster)
        if isinstance(obj, RuntimeClass):
            self._runtime_class_changed(obj.meta.name, cluster=cluster)
        for r in list(self.state.records.values()):
            self.lifecycle.apply_stop_policy(r)
        return self.state.take_events()

    def remove(
        self,
        kind: str,
        name: str,
        *,
        namespace: str = "",
        now_s: float,
        defer: bool = False,
        cluster: str = "",
    ) -> list[Event]:
        """Delete a configuration object (a Namespace: `cluster`'s). Workloads it served wait
        again with the reason (a LocalQueue or ClusterQueue that no longer exists); those
        holding quota keep it. `defer` as in `apply`."""
        self.state.now_s = now_s
        if self.state.config.remove(kind, name, namespace, cluster=cluster):
            self.state.index.config_changed()
            if defer and not self.state.records:
                self._stale = True
            else:
                self._rebuild()
            if kind == "LimitRange":
                self._limit_ranges_changed(namespace, cluster=cluster)
            if kind == "RuntimeClass":
                self._runtime_class_changed(name, cluster=cluster)
        return self.state.take_events()

    def _fit_limit_ranges(self, r: WorkloadRecord, *, fresh: bool = False) -> bool:
        """Charge `r` what Kueue charges in its namespace (core.limit_ranges) and cluster (its
        RuntimeClasses' overhead, core.pod_overhead); whether its requests or its problem
        changed. `fresh`: `r.wl` is as written, so a namespace with no LimitRange leaves the
        requests of a workload naming no RuntimeClass as they are."""
        config = self.state.config
        summary = config.limit_summary(r.local_queue, r.wl.meta.namespace)
        names_one = _names_runtime_class(r.wl)
        classes = config.runtime_classes_of(r.local_queue) if names_one else NO_RUNTIME_CLASSES
        if fresh and summary is None and not names_one:
            wl = r.wl
        else:
            wl = adjusted_workload(r.wl, summary, classes)
        problem = resource_problem(wl, summary, classes)
        if wl is r.wl and problem == r.resource_problem:
            return False
        r.wl, r.resource_problem = wl, problem
        return True

    def _limit_ranges_changed(self, namespace: str, *, cluster: str) -> None:
        """A LimitRange of `namespace` in `cluster` changed: as Kueue, every workload there
        holding no quota is charged anew (one holding quota keeps what it was admitted with)."""
        self._recharge(lambda r: r.wl.meta.namespace == namespace, cluster=cluster)

    def _runtime_class_changed(self, name: str, *, cluster: str) -> None:
        """RuntimeClass `name` of `cluster` changed: every workload there naming it and holding
        no quota is charged anew, as for a LimitRange."""
        self._recharge(lambda r: _names_runtime_class(r.wl, name), cluster=cluster)

    def _recharge(self, concerned: Callable[[WorkloadRecord], bool], *, cluster: str) -> None:
        state = self.state
        lq_clusters = state.config.local_queue_clusters
        for r in list(state.records.values()):
            if lq_clusters.get(r.local_queue, "") != cluster or not concerned(r):
                continue
            if r.holds_quota or r.phase in (Phase.FINISHED, Phase.DELETED):
                continue
            pending = r.phase is Phase.PENDING
            if pending:
                self.lifecycle.release(r)  # off its group: its shape may change
            if self._fit_limit_ranges(r):
                r.shape = shape_of(r)
            if pending:
                self.queueing.enqueue(r)

    def settle(self) -> None:
        """Rebuild what deferred configuration changes left stale (nothing when none did)."""
        if self._stale:
            self._rebuild()

    def submit(self, wl: Workload, *, now_s: float, key: WorkloadKey | None = None) -> list[Event]:
        """A workload arrives. If `wl.admission` is set it arrives admitted, holding that quota.

        `key`: `wl.key` as the caller keeps it already, so that both share one string (a
        workload's key made anew for each index was 0.2 GiB at a million pending)."""
        self.settle()
        state = self.state
        state.now_s = now_s
        key = wl.key if key is None else key
        old = state.records.get(key)
        if old is not None and old.phase is not Phase.DELETED:
            return []  # a redelivered submission changes nothing
        state.seq += 1
        priority = state.config.priority_of(wl)
        r = WorkloadRecord(wl, seq=state.seq, priority=priority, now_s=now_s, key=key)
        r.reclaimable = self._reclaimable(wl.reclaimable_pods)
        if wl.admission is None:
            self._fit_limit_ranges(r, fresh=True)
        r.shape = shape_of(r)
        if old is not None:
            self.lifecycle.drop(old)  # deleted before: the new one arrives last
        state.records[r.key] = r
        if not wl.active:
            self.lifecycle.deactivate(r)
        elif wl.admission is not None:
            self.lifecycle.arrive_admitted(r, wl.admission)
        else:
            take = self.routing.arrive(state, r) if self.routing is not None else None
            if take is not None:
                self.lifecycle.take(r, take)
            self.queueing.enqueue(r)
        # Counted once, as it now is: added first, it was counted, taken out and counted again
        # as its queue, group and phase were set (a third of a rebuild's adoption at 100k).
        # Nothing above reads the index for `r` (routing's loads read other workloads).
        state.index.add(r)
        return state.take_events()

    def finish(
        self,
        key: WorkloadKey,
        *,
        now_s: float,
        reason: str = SUCCEEDED,
        message: str = SUCCEEDED_MESSAGE,
    ) -> list[Event]:
        """The workload completed (or, `reason` FailedToStart, could never start): it releases
        its quota and leaves the queues, Finished with `reason` and `message`."""
        self.state.now_s = now_s
        r = self.state.records.get(key)
        if r is None or r.phase in (Phase.FINISHED, Phase.DELETED):
            return []
        self.lifecycle.finish(r, reason=reason, message=message)
        return self.state.take_events()

    def delete(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        """The workload was deleted: it releases its quota and leaves the queues."""
        self.state.now_s = now_s
        r = self.state.records.get(key)
        if r is None or r.phase is Phase.DELETED:
            return []
        self.lifecycle.release(r)
        self.lifecycle.retire(r)
        r.phase = Phase.DELETED
        return self.state.take_events()

    def evict(self, key: WorkloadKey, *, reason: str, message: str, now_s: float) -> list[Event]:
        """Evict a workload holding quota for a reason from outside (gang placement gave up).

        Reports Evicted; with hold_quota_until_stopped it keeps its quota until `stopped()`,
        otherwise it releases it and is requeued at once (Requeued). A workload that holds no
        quota, or is already being evicted, is left alone.
        """
        self.state.now_s = now_s
        r = self.state.records.get(key)
        if r is None or not r.holds_quota or r.phase is Phase.EVICTING:
            return []
        self.lifecycle.evict(r, reason=reason, message=message)
        return self.state.take_events()

    def refuse_route(self, key: WorkloadKey, *, message: str, now_s: float) -> list[Event]:
        """The cluster will not run `key` with the requests of the alternative it was admitted
        through (docs/routing.md, "On Kubernetes"): it goes back to its declared queue for good
        (Routed, reason RequestsRefused) and is evicted from the alternative's quota.

        A workload not holding quota on an alternative is left alone.
        """
        self.state.now_s = now_s
        r = self.state.records.get(key)
        if r is None or self.routing is None or not r.holds_quota or r.phase is Phase.EVICTING:
            return []
        take = self.routing.refuse(key, message=message)
        if take is None:
            return []
        # Moved first: an eviction that releases at once requeues it on the declared queue.
        # Its quota is the alternative's until released (it follows `r.cluster_queue`).
        self.lifecycle.take(r, take)
        self.lifecycle.evict(r, reason=REQUESTS_REFUSED, message=message)
        return self.state.take_events()

    def forget(self, key: WorkloadKey) -> None:
        """Drop a Finished, Deleted or Inactive workload's record and everything indexing it.

        Afterwards the engine no longer knows `key`: its views raise KeyError, `phase` is None,
        and a later `submit` of the same key is a new workload (the caller dedupes). A workload
        that is pending, backing off or holding quota is not forgotten (a no-op): forgetting it
        would lose queue positions or quota accounting.
        """
        r = self.state.records.get(key)
        if r is None or r.phase not in _DONE:
            return
        self.lifecycle.drop(r)
        self.state.version += 1

    def set_active(self, key: WorkloadKey, active: bool, *, now_s: float) -> list[Event]:
        """spec.active changed (kueuectl's stop and resume workload).

        Deactivated: a pending (or backing-off) workload leaves its queue; one holding quota is
        evicted (reason Deactivated) and, once stopped, stays inactive instead of requeueing.
        Reactivated: an inactive workload, whatever deactivated it, is queued again (Requeued,
        reason Reactivated), or held out until the end a Retry told since its last eviction
        still asks for (`reactivated_retry_end_s`). A finished or deleted workload is left
        alone.
        """
        state = self.state
        state.now_s = now_s
        r = state.records.get(key)
        if r is None or r.phase in (Phase.FINISHED, Phase.DELETED):
            return []
        r.wl = msgspec.structs.replace(r.wl, active=active)
        if active and r.phase is Phase.INACTIVE:
            r.requeue_count = 0
            r.pending_message = ""
            r.drop_conditions(EVICTED)
            end_s = reactivated_retry_end_s(
                r.retry_ends,
                lambda check: retry_counts_waiting(state.config, r.local_queue, check),
                now_s=now_s,
            )
            words = requeued_words(r, REACTIVATED)
            if end_s is None and words is not None:  # held out: said at its end (`fire_timers`)
                r.set_condition(REQUEUED, True, *words)
            self.queueing.enqueue(r)
            if r.group is not None:  # its group may be parked with no head since it left
                self.queueing.retry(r.group)
            state.emit(EventType.REQUEUED, r, REACTIVATED, REACTIVATED_MESSAGE)
            if end_s is not None:  # a Retry told since its last eviction still holds it out
                self.lifecycle.hold_out(r, end_s)
        elif not active and r.phase in (Phase.PENDING, Phase.BACKOFF):
            # Off its queue (and any reservation); a back-off's timer no longer fires.
            self.lifecycle.release(r)
            state.awaiting_victims.discard(r.key)
            # Kueue evicts it though it holds nothing, resetting its checks, unless it is
            # evicted already (since its last reservation): what they told since stays.
            if not r.evicted:
                r.reset_checks()
            r.evicted = True
            self.lifecycle.deactivate(r)
        elif not active and r.holds_quota and r.phase is not Phase.EVICTING:
            self.lifecycle.evict(r, reason=DEACTIVATED, message=DEACTIVATED_MESSAGE)
        return state.take_events()

    def set_reclaimable(
        self, key: WorkloadKey, pods: Sequence[ReclaimablePod], *, now_s: float
    ) -> list[Event]:
        """status.reclaimablePods changed: pods that finished for good give their quota back.

        A workload holding quota holds only what its remaining pods need from now on, and
        what waited for that quota is tried again; a pending one is asked for its remaining
        pods (`core.reclaim`). With the gate ReclaimablePods off the status is kept and
        changes nothing. A finished or deleted workload is left alone.
        """
        state = self.state
        state.now_s = now_s
        r = state.records.get(key)
        if r is None or r.phase in (Phase.FINISHED, Phase.DELETED):
            return []
        r.wl = msgspec.structs.replace(r.wl, reclaimable_pods=tuple(pods))
        reclaimable = self._reclaimable(r.wl.reclaimable_pods)
        if reclaimable != r.reclaimable:
            self.lifecycle.reclaim(r, reclaimable)
        return state.take_events()

    def _reclaimable(self, pods: Sequence[ReclaimablePod]) -> Mapping[str, int]:
        return reclaimable_of(pods) if self.state.config.kueue.reclaimable_pods else NONE

    def stopped(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        """An evicted workload's pods are gone: release its quota and requeue it."""
        self.state.now_s = now_s
        r = self.state.records.get(key)
        if r is None or r.phase is not Phase.EVICTING:
            return []
        self.lifecycle.release(r)
        self.lifecycle.after_eviction(r)
        return self.state.take_events()

    def set_admission_check(
        self,
        key: WorkloadKey,
        check: str,
        state: str,
        *,
        message: str = "",
        requeue_after_s: float | None = None,
        since_s: float | None = None,
        now_s: float,
    ) -> list[Event]:
        """An admission check controller reports Ready, Retry, Rejected or Pending.

        As in Kueue's workload controller, Retry and Rejected count for as long as the workload
        holds quota, admitted or not: Retry evicts it, to queue again once `requeue_after_s`
        (the check's requeueAfterSeconds) has passed since `since_s` (when the check said so,
        its lastTransitionTime; default `now_s`), and its pods are gone; Rejected deactivates
        it, after its pods stop when it was admitted. A Retry while it is already being
        evicted (its pods stopping) evicts nothing more and counts nothing, but a requeueAt
        later than the one set stands (`requeue_state.later`); and so it does after its pods
        are gone while it still waits for that end (Kueue's NeedsRequeueAtUpdate moves
        requeueAt later for a Retry told then). A Retry told once it is queued again, waiting
        for quota, holds it out of its queue until that end (NeedsRequeueAtUpdate runs for any
        unfinished workload; Kueue's queue keeps it inadmissible until requeueAt). Without
        quota, the check counts when its ClusterQueue names it now
        (`requeue_state.retry_counts_waiting`, which admission's ledger asks too).

        A Ready or Pending told since its eviction (Kueue's resetChecksOnEviction, the only
        reset), its pods stopping or gone, or while it waits for quota, is where that check
        starts at its next reservation, as Kueue's status.admissionChecks keeps it: all Ready,
        the reservation admits it at once (`Lifecycle.reserve`). A Retry or Rejected told
        since its eviction began (its pods stopping or gone, or while it is inactive) is kept
        too: queued again (or reactivated: nothing resets checks then), it is set aside until
        that check says otherwise (`Heads`), as Kueue's scheduler leaves a workload with
        failed checks in status unreserved."""
        self.state.now_s = now_s
        r = self.state.records.get(key)
        if r is None:
            return []
        if state == "Retry" and check in r.checks and r.phase in _DECIDING_OR_STOPPING:
            since = now_s if since_s is None else since_s
            end_s = retry_end_s(since, requeue_after_s or 0, now_s=now_s)
            r.requeue_at_s = later(r.requeue_at_s, end_s)
        if r.phase in _WAITING:
            return self._told_waiting(r, check, state, requeue_after_s, since_s, now_s)
        if check not in r.checks or r.phase not in (Phase.RESERVED, Phase.ADMITTED):
            return []
        r.checks[check] = state
        detail = f'"{check}" ({message})' if message else f'"{check}"'
        why = f"AdmissionCheck in {state} state: {detail}"  # Kueue's wording
        if state == "Rejected":
            deactivated = f"The workload is deactivated due to {why}"
            if r.phase is Phase.RESERVED:  # nothing runs yet: its quota goes back at once
                self.lifecycle.evict(
                    r, reason="AdmissionCheck", message=deactivated, deactivate=True
                )
            else:
                r.wl = msgspec.structs.replace(r.wl, active=False)
                self.lifecycle.evict(
                    r, reason="DeactivatedDueToAdmissionCheck", message=deactivated
                )
        elif state == "Retry":
            self.lifecycle.evict(r, reason=ADMISSION_CHECK, message=f"Evicted due to {why}")
        elif r.phase is Phase.RESERVED and all(s == "Ready" for s in r.checks.values()):
            self.lifecycle.admit(r)
        return self.state.take_events()

    def pods_ready(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        """All pods of an admitted workload are ready (waitForPodsReady)."""
        self.state.now_s = now_s
        r = self.state.records.get(key)
        if r is None or r.phase is not Phase.ADMITTED or r.pods_ready:
            return []
        r.pods_ready = True
        r.pods_ready_deadline_s = None
        # The requeue count is kept (Kueue resets it only on reactivation): a workload that
        # keeps losing readiness reaches backoffLimitCount as one that never gets ready does.
        if self.state.config.kueue.wait_for_pods_ready.enable:
            was = r.conditions.get(PODS_READY)
            recovering = was is not None and was.reason in (WAIT_FOR_RECOVERY, RECOVERED)
            reason = RECOVERED if recovering else STARTED
            r.set_condition(PODS_READY, True, reason, READY_MESSAGE)
        return self.state.take_events()

    def pods_unready(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        """A pod of an admitted workload whose pods were all ready is not ready any more
        (waitForPodsReady's recoveryTimeout: `Lifecycle.readiness_lost`)."""
        self.state.now_s = now_s
        r = self.state.records.get(key)
        if r is not None:
            self.lifecycle.readiness_lost(r)
        return self.state.take_events()

    # --- recorded decisions (state rebuild) -----------------------------------------------
    # A restarted service replays the decisions it published before, in stream order; these
    # put the engine back where it was without deciding or reporting anything again.

    def restore_reserved(
        self, key: WorkloadKey, admission: Admission, *, checks: Sequence[str], now_s: float
    ) -> None:
        """Quota was reserved for `key` as recorded; `checks` were still to pass."""
        r = self.state.records.get(key)
        if r is None or r.holds_quota:
            return
        self.state.now_s = now_s
        r.cluster_queue = admission.cluster_queue
        self.lifecycle.hold(r, assignment_of(admission), announce=False)
        r.checks = dict.fromkeys(checks, "Pending")
        self.state.take_events()

    def restore_admitted(self, key: WorkloadKey, *, now_s: float) -> None:
        r = self.state.records.get(key)
        if r is None or r.phase is not Phase.RESERVED:
            return
        r.checks = dict.fromkeys(r.checks, "Ready")
        self.state.now_s = now_s
        self.lifecycle.admit(r)
        self.state.take_events()

    def restore_evicted(
        self, key: WorkloadKey, *, reason: str, message: str, now_s: float, by: str = ""
    ) -> None:
        """The recorded eviction of `key` (for preemptor `by`, when known); with
        hold_quota_until_stopped it keeps its quota until `stopped()`."""
        r = self.state.records.get(key)
        if r is None or not r.holds_quota or r.phase is Phase.EVICTING:
            return
        self.state.now_s = now_s
        self.lifecycle.evict(r, reason=reason, message=message, by=by)
        self.state.take_events()

    def restore_requeues(
        self, key: WorkloadKey, count: int, *, retry_at_s: float | None = None
    ) -> None:
        """The recorded number of PodsReadyTimeout evictions of `key` since it was last
        reactivated (state rebuild): its back-off and backoffLimitCount count on from there;
        and `retry_at_s`, the end a check's Retry set (`set_admission_check`). Restore them
        before a recorded eviction, whose requeue time they set."""
        r = self.state.records.get(key)
        if r is not None:
            r.requeue_count = count
            r.requeue_at_s = retry_at_s

    def restore_held_out(self, key: WorkloadKey, at_s: float) -> None:
        """A queued workload a check's Retry held out of its queue until `at_s` (state
        rebuild; `set_admission_check`): out of it again, until then."""
        r = self.state.records.get(key)
        if r is not None and r.phase is Phase.PENDING:
            self.lifecycle.hold_out(r, at_s)

    def _told_waiting(
        self,
        r: WorkloadRecord,
        check: str,
        state: str,
        requeue_after_s: float | None,
        since_s: float | None,
        now_s: float,
    ) -> list[Event]:
        """`set_admission_check` for a workload holding no quota to decide on: kept as Kueue's
        status keeps it (`WorkloadRecord.tell_check`); a Retry counting now moves its wait."""
        if state == "Retry" and r.phase in (Phase.BACKOFF, Phase.PENDING):
            since = now_s if since_s is None else since_s
            end_s = retry_end_s(since, requeue_after_s or 0, now_s=now_s)
            if end_s is not None and retry_counts_waiting(self.state.config, r.local_queue, check):
                if r.phase is Phase.BACKOFF:
                    self.lifecycle.wait_longer(r, end_s)
                else:
                    self.state.awaiting_victims.discard(r.key)
                    self.lifecycle.hold_out(r, end_s)
        if self.state.config.keeps_told_check(check):
            failed = r.failed_checks
            since = now_s if since_s is None else since_s
            r.tell_check(
                check, state, retry_end_s=retry_end_s(since, requeue_after_s or 0, now_s=since)
            )
            if failed and not r.failed_checks and r.phase is Phase.PENDING:
                # Set aside for its failed checks (`Heads`): back in its queue, in its turn.
                self.lifecycle.release(r)
                self.queueing.enqueue(r)
        return self.state.take_events()

    def restore_told_checks(
        self,
        key: WorkloadKey,
        told: Mapping[str, str],
        *,
        evicted: bool = False,
        retry_ends: Mapping[str, float] = NO_ENDS,
    ) -> None:
        """What its checks told since its last eviction while it held no quota (state
        rebuild; `set_admission_check`): its next reservation starts from a Ready or Pending,
        a Retry or Rejected sets it aside. `evicted`: evicted since its last reservation, so a
        stop keeps them (`set_active`). `retry_ends`: when each Retry asked it to queue again,
        for a reactivation to hold it out until then."""
        r = self.state.records.get(key)
        if r is not None and r.phase in _WAITING:
            r.evicted = r.evicted or evicted
            for check, state in told.items():
                r.tell_check(check, state, retry_end_s=retry_ends.get(check))

    def restore_retry_counts(self, key: WorkloadKey, counts: Mapping[str, int]) -> None:
        """Its checks' retry counts as of its last recorded eviction (state rebuild; Kueue's
        retryCount, `core.check_retries`): restored after that eviction, which counts from
        the states a rebuild does not have."""
        r = self.state.records.get(key)
        if r is not None:
            r.retry_counts = dict(counts) if counts else NO_RETRIES

    def restore_pending(self, key: WorkloadKey, *, reason: str, message: str) -> None:
        """The recorded pending reason, so that a rebuild does not announce it again.

        A workload recorded as having only reserved quota gives it back (a stopped queue took
        it). A preemptor recorded as waiting for its victims to stop (reason
        WaitingForPreemptedWorkloads, or Pending with Kueue's "Pending the preemption of"
        message when pending reasons are not granular) does not preempt again: as on the live
        path, it waits, keeping this reason, until quota is released.
        """
        r = self.state.records.get(key)
        if r is not None and r.phase is Phase.RESERVED:
            self.lifecycle.unreserve(r, (reason, message))
            self.state.take_events()
            return
        if r is None or r.phase is not Phase.PENDING:
            return
        self.queueing.say_waiting(r, reason, message)
        r.pending_message = message
        if reason == WAITING_FOR_VICTIMS or PENDING_PREEMPTION in message:
            self.state.awaiting_victims.add(key)

    def restore_routed(self, key: WorkloadKey, *, queue_name: str) -> None:
        """The recorded routing of `key` to LocalQueue `queue_name` (state rebuild): it moves
        there without deciding or reporting anything."""
        r = self.state.records.get(key)
        if r is None or r.phase is not Phase.PENDING or self.routing is None:
            return
        take = self.routing.restore(key, queue_name=queue_name)
        if take is None:
            return
        self.lifecycle.take(r, take)
        self.queueing.enqueue(r)
        self.state.take_events()

    # --- decisions -----------------------------------------------------------------------

    def schedule(self, *, now_s: float) -> list[Event]:
        """Admit everything that fits now, preempting where the policies allow.

        Also fires timers that are due (requeue back-off, waitForPodsReady timeouts).
        """
        self.settle()
        state = self.state
        state.now_s = now_s
        self.lifecycle.fire_timers()
        state.preempted_this_round = set()
        if not self.lifecycle.admission_blocked():
            if self.routing is not None:
                self.lifecycle.reroute(self.routing)
                for group in self.routing.release(state):
                    self.queueing.retry(group)
            self._schedule_listed()
        return state.take_events()

    def next_wakeup_s(self) -> float | None:
        """The earliest time a timer needs `schedule()` to run, or None."""
        timers = self.state.timers
        while timers:
            at, _, kind, key = timers[0]
            if self.lifecycle.timer_live(kind, key, at):
                return at
            heapq.heappop(timers)
        return None

    def _rebuild(self) -> None:
        """Recompute trees, layouts and usage after a configuration change; requeue all."""
        state = self.state
        self._stale = False
        state.index.config_changed()
        holders = [r for r in state.records.values() if r.holds_quota]
        state.config.build()
        state.usage.rebuild(holders)
        self.queueing.rebuild()

    # --- the round -----------------------------------------------------------------------

    def _schedule_listed(self) -> None:
        """Try every tree with a queue listed, in name order, as a walk over all trees would:
        a tree left with none listed has nothing to try (`_schedule_tree` ends with its queues
        drained), and one listed while the round walks a tree before it is walked in turn."""
        state = self.state
        listed = state.listed
        listed.grew = False
        order = sorted(listed.names)
        i = 0
        while i < len(order):
            name = order[i]
            i += 1
            self._schedule_tree(state.trees[name])
            listed.names.discard(name)
            if listed.grew:  # deciding in this tree listed a queue of another
                listed.grew = False
                order, i = sorted(n for n in listed.names if n > name), 0

    def _schedule_tree(self, tree: TreeRuntime) -> None:
        """Try queues of one cohort tree, best first, until none has an admissible head."""
        if tree.tournament is not None:
            while (won := tree.tournament.winner(tree.root)) is not None:
                cq, nominee = won
                best = cq.best_group()
                assert best is not None
                self.heads.decide(tree, cq, best, nominee, None)
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
            self.heads.decide(tree, cq, group, head, key)


def _names_runtime_class(wl: Workload, name: str | None = None) -> bool:
    """Whether a podset of `wl` names RuntimeClass `name` (any, when None)."""
    for ps in wl.pod_sets:
        wanted = ps.resources.runtime_class_name if ps.resources is not None else ""
        if wanted and (name is None or wanted == name):
            return True
    return False
