"""One admission replica's state: the engine for its shard, the ledger of all workloads. Pure.

Two modes, one after the other:
- *replay* (`replay`): the rebuild. Configuration goes into the engine, workloads and every
  recorded decision into the ledger; nothing is decided and nothing is put in the engine.
- *owning* (`take_ownership`, then `apply` and `decide`): the engine holds the workloads of
  this shard, adopted from the ledger, and decides for them.

A workload's queue timestamp is the time of its `submitted` event (Kueue orders by creation
time), so a replica that adopts it after a restart or a shard move orders it the same way.

Finished and deleted workloads leave the engine (`Engine.forget`) once their round's events are
translated: nothing needs them afterwards. A redelivered `submitted` or `finished` is stopped by
the ledger and by `adopted`, and a rebuild adopts live workloads only.

Admission fair sharing: each LocalQueue's usage is fed from the facts' times (a recorded
QuotaReserved starts a run, the `finished`/`deleted`/`eviction_completed` that released it ends
it), in replay as live, so every replica has the same usage; a snapshot carries what finished
workloads left (`ended_usage`, `restore_usage`).

Routing (docs/routing.md): the engine routes workloads with alternatives; a recorded `routed`
puts an adopted workload back on the queue it was routed to before anything else is restored,
and is not announced again. A shard routes only among the alternatives in its own cohort trees
(`Sharding.foreign_alternatives`); the Routed message names the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence

import msgspec

from muster.admission.dispatch import Dispatcher
from muster.admission.forwarding import Forwards
from muster.admission.homes import Handover, Move, QueueHomes, queue_key
from muster.admission.ledger import CheckState, Entry, Ledger, Phase
from muster.admission.routing import WorkloadRoute, routable, stays_event
from muster.admission.shards import PartitionMap, Sharding
from muster.admission.snapshot import EndedUsage
from muster.admission.translate import (
    GANG_REJECTED,
    ApplyConfig,
    CheckUpdated,
    ConfigRefusedError,
    Decision,
    Delete,
    DeleteConfig,
    Fact,
    Finish,
    GangRejected,
    Manifests,
    PartitionRecord,
    PlacementPreempted,
    PodsReady,
    Recorded,
    RequestsRefused,
    SetActive,
    SetReclaimable,
    Stopped,
    Submit,
    decisions_from,
)
from muster.admission.usage_carry import UsageCarry, valid_usage
from muster.admission.visibility_trees import TreeChanges
from muster.api.model import (
    Admission,
    ClusterQueue,
    KueueConfig,
    ResourceFlavor,
    Workload,
    WorkloadKey,
)
from muster.api.wellknown import GANG_TIMED_OUT, PREEMPTED, START_FAILED
from muster.core.config_owners import NAMESPACED_CONFIG_KINDS, ConfigOwners
from muster.core.engine import Engine
from muster.core.events import Event, EventType
from muster.core.lifecycle import assignment_of
from muster.core.quota import FlavorResource
from muster.core.reclaim import reclaimable_of, reclaimed_usage
from muster.core.records import local_queue_of
from muster.core.requeue_state import retry_counts_waiting, retry_end_s
from muster.core.routing import Policy, RoutingSettings, run_seconds_on

_PENDING = "Pending"  # the engine's Phase value of a queued workload
# Eviction reason (muster's; Kueue has no such case): its pods were stopped under it.
PODS_STOPPED = "PodsStopped"

log = logging.getLogger(__name__)


class AdmissionState:
    """The engine of shard `shard` of `shards` and the ledger of the workloads it reads about."""

    def __init__(
        self,
        *,
        shard: int = 0,
        shards: int = 1,
        source: str = "admission/0",
        default_cluster: str = "local",
        kueue: KueueConfig | None = None,
        cluster_lost_s: float = 10.0,
        routing_policy: Policy = Policy.STATIC,
        admission_fair_sharing: bool = True,
    ) -> None:
        # Routing is always on: a ClusterQueue's muster.dev/routing-policy wins over the default.
        self.routing = RoutingSettings(default_policy=routing_policy)
        # Admission fair sharing: usage runs from each workload's recorded QuotaReserved to
        # the event that released it, at those events' times (`_run_started`, `_run_stopped`),
        # so a replica rebuilt from the stream has the live one's usage; a snapshot carries
        # what finished workloads left (`ended_usage`). `admission_fair_sharing=False` orders
        # by priority and time only (docs/kueue-compatibility.md, "Admission fair sharing").
        self.engine = Engine(
            config=kueue,
            hold_quota_until_stopped=True,
            routing=self.routing,
            admission_fair_sharing=admission_fair_sharing,
        )
        self.dispatch = Dispatcher(lost_after_s=cluster_lost_s)  # MultiKueue (admission/dispatch)
        self.ledger = Ledger()
        self.partitions = PartitionMap(shards=shards)  # moved by config.partition records
        self.sharding = Sharding(self.engine, shard=shard, partitions=self.partitions)
        self.homes = QueueHomes()  # each LocalQueue's partition, to see what a change moves
        self.trees = TreeChanges()  # each ClusterQueue's tree, to see what a change moves
        # Partition -> sequence of its last config.partition record: what this replica's
        # decisions about its workloads are fenced on (docs/events.md, "Partitions").
        self.fences: dict[int, int] = {}
        self.moves: dict[WorkloadKey, Move] = {}  # stories to forward (the shell takes them)
        self.handovers: list[Handover] = []  # LocalQueues to fetch from another's partition
        self.repartitioned = False  # a record moved a partition to or from this replica
        self.forwards = Forwards()  # what was taken through forwards (forwarding.py)
        self.usage_carry = UsageCarry()  # fair sharing usage a LocalQueue brought along
        self.source = source
        self.default_cluster = default_cluster
        self.adopted: set[WorkloadKey] = set()  # in the engine: live workloads of this shard
        self.owning = False
        self.last_sequence = 0  # the last stream sequence applied, replayed or consumed
        self.cluster_queue_clusters: dict[str, str] = {}  # where a ClusterQueue was applied
        # Which cluster may change which object; the manager is this one (admission runs there).
        self.config_owners = ConfigOwners(manager=default_cluster)
        self._fresh: list[WorkloadKey] = []  # adopted since the last round, not answered yet
        self._done: list[WorkloadKey] = []  # finished or deleted: forgotten after `decisions`
        self.notes: dict[WorkloadKey, str] = {}  # alternatives left to other shards, said so

    # --- rebuild ---------------------------------------------------------------------------

    def replay(self, fact: Fact | None, *, sequence: int, cluster: str = "") -> bool:
        """Record one event of history (from `cluster`); decides nothing. Call in stream order.
        False when it was refused (a configuration event of a cluster that does not own the
        object: dead-lettered when it was consumed), so the snapshot log does not keep it."""
        self.last_sequence = max(self.last_sequence, sequence)
        try:
            counted = self.counted(fact, cluster=cluster) if fact is not None else None
        except ConfigRefusedError as exc:
            log.info("rebuild skips config event #%d: %s", sequence, exc)
            return False
        if counted is not None:
            self._record(counted, now_s=0.0)
        return True

    def take_ownership(self, *, now_s: float) -> list[Event]:
        """End the rebuild: adopt the live workloads of this shard, then run one round.

        Returns what adoption and the round decided that was not recorded yet (a replica that
        died between consuming and publishing left it undecided). A workload whose story is
        stored away from its home is to be forwarded there (`moves`) again: its replica may have
        died before it had, and a story forwarded twice changes nothing.
        """
        self.owning = True
        # The rebuild read its partitions after every record it replayed: only a record
        # applied from now on calls for another (left set, every batch rebuilt again).
        self.repartitioned = False
        self.engine.settle()
        self.homes.update(self.engine)
        self.trees.reset(self.engine)
        events: list[Event] = []
        for entry in self.ledger.live():
            home = self.home_of(entry)
            if entry.partition is not None and entry.partition != home:
                self.moves[entry.key] = Move(entry.key, home)
            if home in self.sharding.owned:
                events += self._adopt(entry)
        return events + self.decide(now_s=now_s)

    # --- owning ----------------------------------------------------------------------------

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

    def apply(self, fact: Fact, *, now_s: float, story: bool = False) -> list[Event]:
        """Apply one consumed fact; returns what the engine reported (decide comes after).

        `story`: part of a workload's story forwarded here (forwarding.py): a decision in it is
        history even when this replica made it once.
        """
        return self._record(fact, now_s=now_s, story=story)

    def decide(self, *, now_s: float) -> list[Event]:
        """One admission round: admit what fits, preempt where allowed; fire due timers.

        Every workload that arrived since the last round gets an answer: when the round said
        nothing about it (it waits in a group behind a head that cannot be admitted), it is
        reported pending for its group's reason, as Kueue reports each workload it tried.
        """
        events = self.engine.schedule(now_s=now_s)
        fresh, self._fresh = self._fresh, []
        told = {e.object for e in events if e.type is not EventType.ROUTED}  # where, not whether
        for key in fresh:
            if key not in told:
                events += self._pending_answer(key, now_s=now_s)
        return events + self.dispatch.after_schedule(self.engine, events, now_s=now_s)

    def settled(self) -> bool:
        """Whether deciding now could tell nothing new, the engine being as the last round left
        it (the caller's part): no workload of this shard arrived or ended since, and no
        MultiKueue dispatch waits."""
        return not self._fresh and not self._done and self.dispatch.idle

    def _pending_answer(self, key: WorkloadKey, *, now_s: float) -> list[Event]:
        if self.engine.phase(key) != _PENDING:
            return []
        r = self.engine.records[key]
        if r.pending_message:
            return []  # told already
        waiting = next(
            (c for c in self.engine.workload(key).conditions if c.type == "QuotaReserved"), None
        )
        if waiting is None or waiting.status != "False" or not waiting.message:
            return []
        self.engine.restore_pending(key, reason=waiting.reason, message=waiting.message)
        return [
            Event(
                time=now_s,
                type=EventType.PENDING,
                object=key,
                reason=waiting.reason,
                message=waiting.message,
            )
        ]

    def next_wakeup_s(self) -> float | None:
        wakeups = [self.engine.next_wakeup_s(), self.dispatch.next_wakeup_s()]
        return min((t for t in wakeups if t is not None), default=None)

    def decisions(self, events: Sequence[Event]) -> list[Decision]:
        """The payloads to publish for a round's `events`; then the workloads that finished
        or were deleted in that round leave the engine (these were their last readers)."""
        news = [e for e in events if not self._repeats_route(e)]
        decisions = decisions_from(news, self) + self.dispatch.take_decisions(self)
        done, self._done = self._done, []
        for key in done:
            self.engine.forget(key)
            self.notes.pop(key, None)
        return decisions

    def _repeats_route(self, e: Event) -> bool:
        """Whether `e` says a workload stays where its last recorded Routed already put it
        (a rebuilt engine announces a `fastest` route afresh): no news, not published."""
        if e.type is not EventType.ROUTED or e.from_queue != e.to_queue:
            return False
        key = WorkloadKey(e.object)
        entry, r = self.ledger.get(key), self.engine.records.get(key)
        return entry is not None and r is not None and entry.routed_queue == r.wl.queue_name

    def record_published(self, published: Sequence[Recorded]) -> None:
        """Our own decisions, once JetStream has them: into the ledger."""
        for fact in published:
            self.ledger.record(fact)

    # --- facts -----------------------------------------------------------------------------

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
                ledger.set_active(key, active)
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

    def _run_started(self, key: WorkloadKey) -> None:
        """A recorded QuotaReserved starts the workload's run in its LocalQueue's usage at
        the recorded time: a rebuild learns finished workloads' usage from their history (the
        engine never holds them). The engine's own start of the same run changes nothing."""
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is None or fair.admission_fair_sharing is None:
            return  # not configured: no ledger look-up either
        entry = self.ledger.get(key)
        if entry is None or entry.admission is None or not entry.holds_quota:
            return
        wl = entry.workload
        local_queue = local_queue_of(wl.meta.namespace, entry.routed_queue or wl.queue_name)
        config = fair.admission_fair_sharing
        book.start(key, local_queue, self._held(entry), at_s=entry.reserved_s, config=config)

    def _run_resized(self, key: WorkloadKey, *, at_s: float) -> None:
        """Pods given back (or taken back) change what `key`'s run holds from the fact's time,
        before the engine changes it at the round's (its own change is then a no-op): a live
        replica and a rebuilt one record the same instant."""
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is None or fair.admission_fair_sharing is None:
            return
        entry = self.ledger.get(key)
        if entry is None or entry.admission is None or not entry.holds_quota:
            return
        book.resize(key, self._held(entry), at_s=at_s, config=fair.admission_fair_sharing)

    def _held(self, entry: Entry) -> Mapping[FlavorResource, int]:
        """What `entry`'s admission holds, less its reclaimable pods (as the engine's record:
        `WorkloadRecord.usage`), so the usage a rebuild replays is the live one's."""
        assert entry.admission is not None
        assignment = assignment_of(entry.admission)
        told = entry.reclaimable_pods
        if not told or not self.engine.state.config.kueue.reclaimable_pods:
            return assignment.usage
        reclaimable = reclaimable_of(told)
        return reclaimed_usage(assignment.pod_sets, entry.workload.pod_sets, reclaimable)

    def _run_stopped(self, key: WorkloadKey, *, at_s: float, retire: bool = False) -> None:
        """The fact that released `key`'s quota ends its run at the fact's time, before the
        engine releases it at the round's (its own stop is then a no-op): a live replica and
        a rebuilt one record the same instant. `retire`: the workload is gone (finished,
        deleted), what its runs left is its LocalQueue's from now on (a snapshot keeps it)."""
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is None or fair.admission_fair_sharing is None:
            return
        book.stop(key, at_s=at_s, config=fair.admission_fair_sharing)
        if retire:
            book.retire(key, config=fair.admission_fair_sharing)

    def ended_usage(self) -> tuple[EndedUsage, ...]:
        """What retired workloads left in the usage of the LocalQueues of this replica's
        partitions, for its snapshot (they are not in it)."""
        book = self.engine.state.admission_usage
        if book is None:
            return ()
        out: list[EndedUsage] = []
        for local_queue in sorted(book.queues):
            ended = book.ended(local_queue)
            namespace, _, name = local_queue.partition("/")
            partition = self.sharding.partition_of_local_queue(namespace, name)
            if ended is not None and partition in self.sharding.owned:
                at_s, consumed = ended
                out.append(
                    EndedUsage(
                        local_queue=local_queue, partition=partition, at_s=at_s, consumed=consumed
                    )
                )
        return tuple(out)

    def restore_usage(
        self, usage: Sequence[EndedUsage], partitions: Collection[int], *, sequence: int = 0
    ) -> None:
        """Start from what a snapshot (of stream sequence `sequence`) says retired workloads
        left in the LocalQueues of `partitions` (before its events are replayed: their runs
        add to it; so do the records carrying usage there after it: usage_carry.py)."""
        self.usage_carry.restored_from(dict.fromkeys(partitions, sequence))
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is None or fair.admission_fair_sharing is None:
            return
        for ended in usage:
            if ended.partition not in partitions:
                continue
            if not valid_usage(ended.at_s, ended.consumed):
                log.warning("snapshot usage of LocalQueue %s skipped: at_s %r, consumed %r",
                            ended.local_queue, ended.at_s, ended.consumed)  # fmt: skip
                continue
            book.restore_ended(
                ended.local_queue,
                ended.at_s,
                ended.consumed,
                config=fair.admission_fair_sharing,
            )

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

    # --- ownership -------------------------------------------------------------------------

    def home_of(self, entry: Entry) -> int:
        """The partition `entry`'s events belong in now (homes.py)."""
        return self.sharding.partition_of_local_queue(
            entry.workload.meta.namespace, entry.queue_name
        )

    def _owns(self, entry: Entry) -> bool:
        return self.home_of(entry) in self.sharding.owned

    def forward_target(self, key: WorkloadKey, *, arrived_on: int | None) -> int | None:
        """Where to forward a report about `key` that arrived in partition `arrived_on`: its
        home, when another replica decides that and it is not where the report is (a
        publisher still named the old one). None: nowhere (call before applying it)."""
        entry = self.ledger.get(key)
        if entry is None or arrived_on is None or not self.owning:
            return None
        home = self.home_of(entry)
        return home if home != arrived_on and home not in self.sharding.owned else None

    def _partition_record(self, record: PartitionRecord) -> None:
        """A record fences its partition; one naming a shard moves the partition there."""
        self.fences[record.partition] = max(self.fences.get(record.partition, 0), record.sequence)
        if record.shard is not None:
            self.partitions.move(record.partition, record.shard)
            self.repartitioned = self.sharding.refresh() or self.repartitioned
        book, fair = self.engine.state.admission_usage, self.engine.state.config.kueue
        if book is not None and fair.admission_fair_sharing is not None:
            owned = self.sharding.owned
            self.usage_carry.apply(record, book, fair.admission_fair_sharing, owned=owned)

    def _rebalance(self, *, now_s: float) -> list[Event]:
        """After a configuration change: the LocalQueues it moved to another partition take
        their workloads along (homes.py). Adopt those whose home is now one of ours, drop
        those that left (their story is forwarded to their new home), and fetch the stories
        of LocalQueues that came from another replica's partition (`handovers`)."""
        if not self.owning:
            return []
        self.trees.note(self.engine)  # for the views: a tree that left and came back
        moved = self.homes.update(self.engine)
        if not moved:
            return []
        owned = self.sharding.owned
        for queue, (old, new) in sorted(moved.items()):
            if new.partition in owned and old.partition not in owned and old.in_tree:
                self.handovers.append(Handover(queue, old.partition, new.partition))
        events: list[Event] = []
        for entry in self.ledger.live():
            if queue_key(entry.workload.meta.namespace, entry.queue_name) not in moved:
                continue
            home = self.home_of(entry)
            if entry.partition is not None and entry.partition != home:
                self.moves[entry.key] = Move(entry.key, home)
            if home in owned and entry.key not in self.adopted:
                events += self._adopt(entry)
            elif home not in owned and entry.key in self.adopted:
                self.adopted.discard(entry.key)
                self.notes.pop(entry.key, None)
                self.engine.delete(entry.key, now_s=now_s)
                self._done.append(entry.key)
                events = [e for e in events if e.object != entry.key]
        return events

    def partition_for(self, key: WorkloadKey) -> int | None:
        """The partition `key`'s decisions are stored in: where its story is."""
        entry = self.ledger.get(key)
        if entry is None:
            return None
        return self.home_of(entry) if entry.partition is None else entry.partition

    def queue_of(self, key: WorkloadKey) -> str:
        """`namespace/name` of the LocalQueue `key` is in now ("" when unknown)."""
        entry = self.ledger.get(key)
        if entry is None:
            return ""
        return queue_key(entry.workload.meta.namespace, entry.queue_name)

    def routed_home(self, key: WorkloadKey) -> None:
        """After its `routed` was stored: a workload routed to another partition's tree moves
        there (`moves`)."""
        entry = self.ledger.get(key)
        if entry is None or entry.partition is None:
            return
        home = self.home_of(entry)
        if home != entry.partition:
            self.moves[key] = Move(key, home)

    def moved(self, key: WorkloadKey, partition: int) -> None:
        """`key`'s story is now stored in `partition` too (forwarded there)."""
        entry = self.ledger.get(key)
        if entry is not None and partition in self.sharding.owned:
            entry.partition = partition  # ours: its story is there from now on

    def _adopt(self, entry: Entry) -> list[Event]:
        """Put a live workload into the engine as the ledger records it.

        Returns what the engine reported only for a workload nothing was decided about yet
        (it may arrive admitted); otherwise the recorded decisions stand and are not redone.
        """
        engine, key = self.engine, entry.key
        wl = ours = self._routable(entry)  # only the alternatives this shard routes to
        # A copy only where it differs: at a million pending, one per workload was 0.1 GiB.
        if entry.decided and wl.admission is not None:
            wl = msgspec.structs.replace(wl, admission=None)
        if entry.phase is Phase.INACTIVE and wl.active:
            wl = msgspec.structs.replace(wl, active=False)
        if entry.reclaimable_pods is not None:  # told since it was submitted
            wl = msgspec.structs.replace(wl, reclaimable_pods=entry.reclaimable_pods)
        events = engine.submit(wl, now_s=entry.submitted_s, key=key)
        self.adopted.add(key)
        if entry.requeue_count or entry.retry_at_s is not None:  # before its eviction's
            engine.restore_requeues(key, entry.requeue_count, retry_at_s=entry.retry_at_s)
        if entry.phase is Phase.BACKOFF and entry.admission is None and entry.retry_at_s:
            # Held out of its queue by a check's Retry told while it waited for quota.
            engine.restore_held_out(key, entry.retry_at_s)
        if entry.routed_queue:
            # Back where its last Routed sent it, before its quota is restored; announced then.
            engine.restore_routed(key, queue_name=entry.routed_queue)
            events = [e for e in events if e.type is not EventType.ROUTED]
        if entry.admission is None:
            self._restore_told_checks(entry)
        if not entry.decided:
            self._fresh.append(key)
            return events + self._stays_unrouted(entry, ours, entry.submitted_s)
        if entry.admission is not None and entry.phase in (
            Phase.RESERVED,
            Phase.ADMITTED,
            Phase.EVICTING,
            Phase.BACKOFF,
        ):
            engine.restore_reserved(
                key, entry.admission, checks=entry.checks, now_s=entry.reserved_s
            )
            if entry.admitted_s is not None:
                engine.restore_admitted(key, now_s=entry.admitted_s)
                if entry.pods_ready or entry.unready_s is not None:
                    engine.pods_ready(key, now_s=entry.admitted_s)
                if entry.unready_s is not None:  # its recoveryTimeout counts from then
                    engine.pods_unready(key, now_s=entry.unready_s)
            if entry.phase in (Phase.EVICTING, Phase.BACKOFF):
                engine.restore_evicted(
                    key,
                    reason=entry.evicted_reason,
                    message=entry.evicted_message,
                    now_s=entry.evicted_s,
                )
            if entry.phase is Phase.BACKOFF:
                # Its back-off over by the time its pods were gone, it was requeued then; the
                # `requeued` is not stored (the replica stopped first): it is said now.
                events = engine.stopped(key, now_s=entry.stopped_s)
            if not entry.active:  # stopped while it held quota: inactive once evicted
                engine.set_active(key, False, now_s=entry.evicted_s)
            self._restore_told_checks(entry)  # after its eviction, which resets them
            if entry.phase in (Phase.RESERVED, Phase.ADMITTED) and entry.check_states:
                return self._told_checks(entry)
            if entry.phase is Phase.RESERVED and not entry.checks:
                return self._admit_now(entry)
            if entry.phase is Phase.BACKOFF:
                return [e for e in events if e.type is EventType.REQUEUED]
        elif entry.phase is Phase.PENDING and entry.pending_message:
            # A preemptor recorded as waiting for its victims stays parked: no second preemption.
            engine.restore_pending(key, reason=entry.pending_reason, message=entry.pending_message)
        return []

    def _restore_told_checks(self, entry: Entry) -> None:
        """The Ready and Pending told since its last eviction while it held no quota, for its
        next reservation to start from, as the live engine's did."""
        if entry.check_states and entry.phase not in (Phase.RESERVED, Phase.ADMITTED):
            told = {check: s.state for check, s in entry.check_states.items()}
            self.engine.restore_told_checks(entry.key, told)

    def _admit_now(self, entry: Entry) -> list[Event]:
        """Reserved with no check to pass, yet not admitted: the round that reserved it admitted
        it too, but its replica died between publishing the two (they go in separate waves).
        Admitted now, or it would hold its quota and never start."""
        self.engine.restore_admitted(entry.key, now_s=entry.reserved_s)
        cq = entry.admission.cluster_queue if entry.admission is not None else ""
        message = f"The workload is admitted to ClusterQueue {cq}"
        return [
            Event(
                time=entry.reserved_s,
                type=EventType.ADMITTED,
                object=entry.key,
                reason="Admitted",
                message=message,
            )
        ]

    def _told_checks(self, entry: Entry) -> list[Event]:
        """What the checks told since the reservation, answered again: a Retry or Rejected
        evicts it (no eviction was stored after it, or the entry would be evicting: its replica
        died first, or none ran when it was told), else Ready ones count (they may admit it).
        As Kueue's workload controller, which acts on the Workload's check states whenever it
        reconciles, not on the update that set them."""
        told = sorted(entry.check_states.items())
        # Kueue's order: a Rejected check deactivates it, else a Retry evicts it.
        answered = next(
            (picked for wanted in ("Rejected", "Retry", "Ready")
             if (picked := [(c, s) for c, s in told if s.state == wanted])),
            [],
        )  # fmt: skip
        events: list[Event] = []
        for check, s in answered:
            events += self.engine.set_admission_check(
                entry.key,
                check,
                s.state,
                message=s.message,
                requeue_after_s=s.requeue_after_s,
                since_s=s.at_s,
                now_s=max(s.at_s, entry.reserved_s),
            )
        return events

    # --- routing ---------------------------------------------------------------------------

    def _routable(self, entry: Entry) -> Workload:
        """The workload as this shard routes it (`routing.routable`); remembers the note.
        One whose routed requests a cluster refused has no alternatives any more."""
        if entry.declared_only:
            self.notes.pop(entry.key, None)
            return msgspec.structs.replace(entry.workload, alternatives=())
        wl, note = routable(entry.workload, self.sharding, keep=entry.routed_queue)
        if note:
            self.notes[entry.key] = note
        else:
            self.notes.pop(entry.key, None)
        return wl

    def _stays_unrouted(self, entry: Entry, wl: Workload, now_s: float) -> list[Event]:
        """The Routed event of a pending workload whose alternatives (none recorded yet) are
        all another shard's: it stays, and says so once."""
        left_out = entry.workload.alternatives and not wl.alternatives
        if not left_out or entry.routed_queue or self.engine.phase(entry.key) != _PENDING:
            return []
        event = stays_event(self.engine, self.routing, entry.workload, now_s=now_s)
        return [] if event is None else [event]

    # --- DecisionContext -------------------------------------------------------------------

    def admission_of(self, key: WorkloadKey) -> Admission | None:
        r = self.engine.records.get(key)
        if r is None or r.assignment is None:
            return None
        return Admission(cluster_queue=r.cluster_queue, pod_set_assignments=r.assignment.pod_sets)

    def checks_of(self, key: WorkloadKey) -> Sequence[str]:
        r = self.engine.records.get(key)
        if r is None:
            return ()
        return tuple(sorted(c for c, s in r.checks.items() if s != "Ready"))

    def has_checks(self, key: WorkloadKey) -> bool:
        r = self.engine.records.get(key)
        return r is not None and bool(r.checks)

    def cluster_queue_of(self, key: WorkloadKey) -> str:
        r = self.engine.records.get(key)
        return "" if r is None else r.cluster_queue

    def cluster_of(self, key: WorkloadKey) -> str:
        target = self.dispatch.target(key)
        if target is not None:
            return target  # dispatched (MultiKueue): its decisions go to that cluster
        entry = self.ledger.get(key)
        return self.default_cluster if entry is None or not entry.cluster else entry.cluster

    def generation_of(self, key: WorkloadKey) -> int:
        entry = self.ledger.get(key)
        return 0 if entry is None else entry.generation

    def submitted_id_of(self, key: WorkloadKey) -> str:
        entry = self.ledger.get(key)
        return "" if entry is None else entry.submitted_id

    def manifests_of(self, key: WorkloadKey) -> Manifests:
        return self.ledger.manifests(key, default_cluster=self.default_cluster)

    def route_of(self, key: WorkloadKey) -> WorkloadRoute | None:
        entry, r = self.ledger.get(key), self.engine.records.get(key)
        if entry is None or r is None or not entry.workload.alternatives:
            return None
        queue = r.wl.queue_name
        return WorkloadRoute(
            queue_name=queue,
            away=queue != entry.workload.queue_name,
            pod_sets=r.wl.pod_sets,
            run_s=run_seconds_on(entry.workload, queue),
            note=self.notes.get(key, ""),
        )

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]:
        return self.engine.config.flavors
