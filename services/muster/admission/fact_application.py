"""Consumed facts applied to one admission replica: the ledger records each, the engine
hears those of its own shard's workloads (`adopted`) once the replica owns it.

`FactApplication.counted` filters a fact by the cluster it came from (configuration owners,
MultiKueue reports, stale eviction completions); `_record` applies it. What the modes above
it supply (fair sharing runs, partition records, rebalancing after a configuration change)
is named by the abstract methods at the end, implemented in `state.AdmissionState`.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable

from muster.admission.decision_reads import DecisionReads
from muster.admission.facts import (
    GANG_REJECTED,
    ApplyConfig,
    CheckUpdated,
    ConfigRefusedError,
    Delete,
    DeleteConfig,
    Fact,
    Finish,
    GangRejected,
    PartitionRecord,
    PlacementPreempted,
    PodsReady,
    Recorded,
    RequestsRefused,
    SetActive,
    SetReclaimable,
    Stopped,
    Submit,
)
from muster.admission.homes import Move
from muster.admission.ledger import CheckState, Phase, retry_ends_of
from muster.api.model import ClusterQueue, WorkloadKey
from muster.api.wellknown import GANG_TIMED_OUT, PREEMPTED, START_FAILED
from muster.core.config_owners import NAMESPACED_CONFIG_KINDS
from muster.core.events import Event
from muster.core.records import local_queue_of
from muster.core.requeue_state import (
    reactivated_retry_end_s,
    retry_counts_waiting,
    retry_end_s,
)

# Eviction reason (muster's; Kueue has no such case): its pods were stopped under it.
PODS_STOPPED = "PodsStopped"

log = logging.getLogger(__name__)


class FactApplication(DecisionReads, abc.ABC):
    """Facts into the ledger and, for this shard's workloads, into the engine."""

    # --- where a fact comes from ----------------------------------------------------------

    def counted(self, fact: Fact, *, cluster: str) -> Fact | None:
        """`fact` as it counts coming from `cluster`, or None when it does not (a report about
        a workload from a cluster it does not run on: admission/dispatch.py). Call once per
        event, in stream order, before `apply`. Raises ConfigRefusedError for a configuration event
        from a cluster that does not own its object (`muster.core.config_owners`)."""
        self._check_owner(fact, cluster)
        if isinstance(fact, SetReclaimable) and not self._from_its_object(fact.key, cluster):
            return None
        counted = self.dispatch.admit_fact(fact, cluster=cluster)
        if isinstance(counted, Stopped) and self._stale_completion(counted):
            return None
        if counted is not None:
            self.dispatch.observe(counted, cluster=cluster)
        return counted

    def _from_its_object(self, key: WorkloadKey, cluster: str) -> bool:
        """Whether `cluster` holds `key`'s Job or Workload, whose reclaimable pods count (Kueue
        reads them on the manager, from its Job showing the copy's status, under MultiKueue
        too); any cluster for one unknown or of unknown origin, as before."""
        entry = self.ledger.get(key)
        return not cluster or entry is None or not entry.cluster or entry.cluster == cluster

    def _check_owner(self, fact: Fact, cluster: str) -> None:
        match fact:
            case ApplyConfig(kind=kind, name=name):
                refused = self.config_owners.admit(kind, name, cluster)
            case DeleteConfig(kind=kind, name=name):
                refused = self.config_owners.admit(kind, name, cluster, deleted=True)
            case _:
                return
        if refused:
            raise ConfigRefusedError(refused)

    def _stale_completion(self, fact: Stopped) -> bool:
        """Whether `fact` completes an eviction other than the workload's current one.

        The binder stopped only that eviction's admission's pods (it fences on the eviction):
        whatever runs now is untouched, so nothing is released. Said in the log, not silently.
        """
        if not fact.eviction_id or self.ledger.completes(fact.key, fact.eviction_id):
            return False
        log.info(
            "ignoring eviction_completed of eviction %s: not the current one",
            fact.eviction_id,
            extra={"workload": fact.key},
        )
        return True

    # --- facts ----------------------------------------------------------------------------

    def _record(self, fact: Fact, *, now_s: float, story: bool = False) -> list[Event]:
        engine, ledger = self.engine, self.ledger
        match fact:
            case Submit():
                at_s = fact.at_s or now_s
                entry = ledger.submit(
                    fact.workload,
                    cluster=fact.cluster,
                    generation=fact.generation,
                    at_s=at_s,
                    manifest_json=fact.manifest_json,
                    partition=fact.partition,
                    owner_manifest_json=fact.owner_manifest_json,
                    submitted_id=fact.event_id,
                )
                if entry is None or not self.owning:
                    return []  # a duplicate, or history
                home = self.home_of(entry)
                if entry.partition is not None and entry.partition != home:
                    # Published in the wrong one (its LocalQueue's partition was not known
                    # yet): forwarded home even on one shard (forwarding.py says why).
                    self.moves[entry.key] = Move(entry.key, home)
                if home not in self.sharding.owned:
                    return []  # another replica's
                self.adopted.add(entry.key)
                self._fresh.append(entry.key)
                wl = self._routable(entry)
                events = engine.submit(wl, now_s=at_s, key=entry.key)
                return events + self._stays_unrouted(entry, wl, at_s)
            case Finish(key, at_s):
                self._run_stopped(key, at_s=at_s or now_s, retire=True)
                ledger.finish(key)
                self.forwards.forget(key)
                return self._engine_fact(key, lambda: engine.finish(key, now_s=now_s), drop=True)
            case Delete(key, at_s):
                self._run_stopped(key, at_s=at_s or now_s, retire=True)
                ledger.delete(key)
                self.forwards.forget(key)
                self.adopted.discard(key)
                if not self.owning or engine.phase(key) is None:
                    return []
                self._done.append(key)
                return engine.delete(key, now_s=now_s)  # finished ones too: out of its views
            case Stopped(key, at_s, eviction_id):
                if not eviction_id and self._admitted_now(key):
                    return self._stopped_while_admitted(key, now_s=now_s)
                if self._evicting(key):
                    self._run_stopped(key, at_s=at_s)
                ledger.stopped(key, at_s=at_s)
                return self._engine_fact(key, lambda: engine.stopped(key, now_s=now_s))
            case PodsReady(key, lost=True, at_s=at_s):
                ledger.pods_unready(key, at_s=at_s)
                return self._engine_fact(key, lambda: engine.pods_unready(key, now_s=now_s))
            case PodsReady(key):
                ledger.pods_ready(key)
                return self._engine_fact(key, lambda: engine.pods_ready(key, now_s=now_s))
            case SetActive(key, active):
                ledger.set_active(key, active, held_until_s=self._held_out_s(key, now_s=now_s))
                return self._engine_fact(key, lambda: engine.set_active(key, active, now_s=now_s))
            case SetReclaimable(key, pods, at_s):
                ledger.set_reclaimable(key, pods)
                self._run_resized(key, at_s=at_s or now_s)
                return self._engine_fact(
                    key, lambda: engine.set_reclaimable(key, pods, now_s=now_s)
                )
            case CheckUpdated(key, check, state, message, requeue_after_s, at_s):
                # Counted from when the check entered Retry (its lastTransitionTime, carried by
                # the event), which a rebuild and the watcher read too, not from when this
                # replica got to it.
                since_s = at_s or now_s
                retry_at_s = retry_end_s(since_s, requeue_after_s, now_s=since_s)
                told = CheckState(state, message, since_s, requeue_after_s)
                ledger.check_updated(
                    key,
                    check,
                    told,
                    retry_at_s=retry_at_s,
                    counts_waiting=self._retry_counts_waiting(fact, now_s=now_s),
                    kept=engine.state.config.keeps_told_check(check),
                )
                return self._engine_fact(
                    key,
                    lambda: engine.set_admission_check(
                        key,
                        check,
                        state,
                        message=message,
                        requeue_after_s=requeue_after_s,
                        since_s=since_s,
                        now_s=now_s,
                    ),
                )
            case GangRejected(key, reason, message):
                return self._gang_rejected(key, reason, message, now_s=now_s)
            case RequestsRefused(key, message):
                ledger.requests_refused(key)
                return self._engine_fact(
                    key, lambda: engine.refuse_route(key, message=message, now_s=now_s)
                )
            case PlacementPreempted(gang, victims):
                return self._placement_preempted(gang, victims, now_s=now_s)
            case ApplyConfig():
                if isinstance(fact.obj, ClusterQueue):
                    self.cluster_queue_clusters[fact.obj.meta.name] = fact.cluster
                # Replaying history: the trees are built once, when ownership is taken.
                events = engine.apply(
                    fact.obj, now_s=now_s, defer=not self.owning, cluster=fact.cluster
                )
                return events + self._rebalance(now_s=now_s)
            case DeleteConfig(kind, name, cluster):
                namespace, _, name = (
                    name.rpartition("/") if kind in NAMESPACED_CONFIG_KINDS else ("", "", name)
                )
                events = engine.remove(
                    kind,
                    name,
                    namespace=namespace,
                    now_s=now_s,
                    defer=not self.owning,
                    cluster=cluster,
                )
                return events + self._rebalance(now_s=now_s)
            case PartitionRecord():
                self._partition_record(fact)
            case Recorded():
                return self._recorded(fact, story=story)
        return []

    def _retry_counts_waiting(self, fact: CheckUpdated, *, now_s: float) -> bool:
        """Whether this Retry moves the wait of a workload holding no quota, by the engine's
        rule (`retry_counts_waiting`) and the configuration as it stands when it is told, so
        the ledger a rebuild starts from holds it out exactly as the live engine did."""
        entry = self.ledger.get(fact.key)
        if entry is None or fact.state != "Retry" or entry.holds_quota:
            return False
        since_s = fact.at_s or now_s
        if retry_end_s(since_s, fact.requeue_after_s, now_s=now_s) is None:
            return False
        wl = entry.workload
        local_queue = local_queue_of(wl.meta.namespace, entry.routed_queue or wl.queue_name)
        return retry_counts_waiting(self.engine.state.config, local_queue, fact.check)

    def _held_out_s(self, key: WorkloadKey, *, now_s: float) -> float | None:
        """Until when an inactive workload reactivated now is held out of its queue by a
        Retry told since its last eviction: the engine's rule (`reactivated_retry_end_s`,
        `set_active`) with the configuration of this instant, so the ledger a rebuild starts
        from holds it out as the live engine did."""
        entry = self.ledger.get(key)
        if entry is None or entry.phase is not Phase.INACTIVE:
            return None
        wl = entry.workload
        local_queue = local_queue_of(wl.meta.namespace, entry.routed_queue or wl.queue_name)
        config = self.engine.state.config
        return reactivated_retry_end_s(
            retry_ends_of(entry),
            lambda check: retry_counts_waiting(config, local_queue, check),
            now_s=now_s,
        )

    def _engine_fact(
        self, key: WorkloadKey, call: Callable[[], list[Event]], *, drop: bool = False
    ) -> list[Event]:
        if not self.owning or key not in self.adopted:
            return []
        if drop:
            self.adopted.discard(key)
            self._done.append(key)
        return call()

    def _recorded(self, fact: Recorded, *, story: bool = False) -> list[Event]:
        if self.owning and fact.source == self.source and not story:
            return []  # ours: the ledger has it since we published it
        if not self.ledger.record(fact):
            return []  # about no live workload, or an earlier one of its name
        if fact.kind in ("quota_reserved", "admitted"):
            self._run_started(fact.key)
        if self.owning and fact.key in self.adopted:
            # Another replica decided for a workload of ours: it was its own until a
            # configuration change moved it here. Keep the engine in line with history.
            self._restore(fact)
        return []

    def _restore(self, fact: Recorded) -> None:
        engine, key = self.engine, fact.key
        match fact.kind:
            case "quota_reserved" if fact.admission is not None:
                engine.restore_reserved(key, fact.admission, checks=fact.checks, now_s=fact.at_s)
            case "admitted":
                if fact.admission is not None:  # stored before its quota_reserved: both
                    engine.restore_reserved(key, fact.admission, checks=(), now_s=fact.at_s)
                engine.restore_admitted(key, now_s=fact.at_s)
            case "evicted":
                engine.restore_evicted(
                    key, reason=fact.reason, message=fact.message, now_s=fact.at_s
                )
            case "pending":
                engine.restore_pending(key, reason=fact.reason, message=fact.message)
            case "routed":
                engine.restore_routed(key, queue_name=fact.queue_name)

    def _evicting(self, key: WorkloadKey) -> bool:
        entry = self.ledger.get(key)
        return entry is not None and entry.phase is Phase.EVICTING

    def _admitted_now(self, key: WorkloadKey) -> bool:
        entry = self.ledger.get(key)
        return entry is not None and entry.phase is Phase.ADMITTED

    def _stopped_while_admitted(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        """An eviction_completed naming no eviction, while admitted: a binder from before
        evictions were named stopped every pod of the workload, the current admission's too.
        Holding quota with no pods, it would never finish: it is evicted (then requeued once
        this eviction completes), instead of the completion being ignored."""
        if not self.owning or key not in self.adopted:
            return []
        message = "its pods were stopped by an earlier eviction's late completion"
        return self.engine.evict(key, reason=PODS_STOPPED, message=message, now_s=now_s)

    def _gang_rejected(
        self, key: WorkloadKey, reason: str, message: str, *, now_s: float
    ) -> list[Event]:
        """The gang timed out: evict the workload (reason GangRejected); it keeps its quota until
        eviction_completed, then requeues. A workload not holding quota is left alone. A failed
        bind is not a rejection of the workload: gangpermit retries the gang as a whole. A
        worker that refused to create it (StartFailed): MultiKueue sends it elsewhere."""
        if not self.owning or key not in self.adopted:
            return []
        if reason == START_FAILED:
            return self.dispatch.refused(self.engine, key, message, now_s=now_s)
        if reason != GANG_TIMED_OUT:
            return []
        text = f"{reason}: {message}" if message else reason
        return self.engine.evict(key, reason=GANG_REJECTED, message=text, now_s=now_s)

    def _placement_preempted(
        self, gang: str, victims: tuple[WorkloadKey, ...], *, now_s: float
    ) -> list[Event]:
        """Evict the victims this shard owns that still hold quota (reason Preempted)."""
        if not self.owning:
            return []
        events: list[Event] = []
        for key in victims:
            if key in self.adopted and self.engine.holds_quota(key):
                message = f"Preempted to place gang {gang} on the nodes it holds"
                events += self.engine.evict(key, reason=PREEMPTED, message=message, now_s=now_s)
        return events

    # --- supplied by the modes (state.AdmissionState) -------------------------------------

    @abc.abstractmethod
    def _run_started(self, key: WorkloadKey) -> None: ...

    @abc.abstractmethod
    def _run_resized(self, key: WorkloadKey, *, at_s: float) -> None: ...

    @abc.abstractmethod
    def _run_stopped(self, key: WorkloadKey, *, at_s: float, retire: bool = False) -> None: ...

    @abc.abstractmethod
    def _partition_record(self, record: PartitionRecord) -> None: ...

    @abc.abstractmethod
    def _rebalance(self, *, now_s: float) -> list[Event]: ...
