"""MultiKueue in the admission service: dispatch to worker clusters, fencing and cluster loss.
Pure: `AdmissionState` calls it; the heartbeats come in through `admission/clusters.py`.

- **Dispatch.** A workload that reserves quota in a ClusterQueue with a MultiKueue check waits
  for a cluster. After each round's `schedule`, `after_schedule` tries every waiting workload
  (`muster.core.dispatch` over its MultiKueueConfig's clusters, with their last heartbeats less
  the room held for workloads dispatched and not yet placed there). The chosen cluster becomes
  the workload's *target*: its check turns Ready, the engine admits it, and its `admitted` (and
  every later decision until its pods are gone) is published on that cluster's subjects, so
  that cluster's binder starts it. The check's state and message are published as
  `admission_check` events whenever they change.
- **Facts from the right cluster.** Once a workload has been admitted to a cluster, facts about
  its pods (finished, eviction_completed, pods_ready, gang_rejected, placement preemption)
  count only from that cluster (`admit_fact`); a late report from another is ignored.
- **Cluster loss.** A cluster whose heartbeat is older than `lost_after_s` is lost: each
  workload targeted there is evicted (reason ClusterLost) and, as its pods cannot be confirmed
  gone, admission itself publishes its `eviction_completed` on that cluster's subject; the
  engine then requeues it and it is dispatched elsewhere. The `cmd.evict` the preemption
  service sends stays in the lost cluster's work queue and is carried out if it comes back;
  until that cluster's binder reports it done, the workload is *fenced* off that cluster: not
  dispatched there again and nothing that cluster says about it counts.

The bookkeeping (what waits, targets, holds, losses, fences, refusals) is
`muster.core.dispatcher`'s, shared with `muster simulate`; this module keeps the registry of
workers (heartbeats, namespaces, MultiKueue configs), the engine's side and what is published.
Every replica folds the same stream through `observe`, so all of them agree on targets and
fences; only the owner of a workload's cohort tree decides for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import Message

from muster.admission.decisions import Decision, DecisionContext
from muster.admission.facts import (
    ApplyConfig,
    CheckUpdated,
    Delete,
    DeleteConfig,
    Fact,
    Finish,
    GangRejected,
    PlacementPreempted,
    PodsReady,
    Recorded,
    RequestsRefused,
    Stopped,
)
from muster.api.model import (
    AdmissionCheck,
    MultiKueueCluster,
    MultiKueueConfig,
    Namespace,
    WorkloadKey,
)
from muster.api.wellknown import ADMISSION_CHECK, CLUSTER_LOST
from muster.contracts.v1 import events_pb2 as pb
from muster.core.dispatch import (
    ClusterCapacity,
    NoClusterFits,
    Takes,
    demand_of,
    is_multikueue,
    route_of,
)
from muster.core.dispatcher import (
    ClusterView,
    DispatcherState,
    Sent,
    Try,
    Waiting,
)
from muster.core.engine import Engine
from muster.core.events import Event, EventType
from muster.core.heartbeat import reached

READY, PENDING, RETRY = "Ready", "Pending", "Retry"
_RESERVED = "QuotaReserved"  # the engine's Phase values this module reads
_HOLDING = frozenset({"QuotaReserved", "Admitted"})
_EVICTING = "Evicting"
# Reports of the workload's pods: they count only from where it runs. Not SetReclaimable: as
# Kueue's job reconciler on the manager, it counts from the cluster of the workload's object,
# whose Job shows its copy's status from where it runs (AdmissionState.counted).
WORKER_FACTS = (Finish, Stopped, PodsReady, GangRejected, RequestsRefused)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """An event to publish that no engine event stands for."""

    field: str
    payload: Message
    key: WorkloadKey
    cluster: str  # "" for the workload's cluster when published
    time_s: float


class Dispatcher:
    """The worker registry and the dispatch bookkeeping of one admission replica."""

    def __init__(self, *, lost_after_s: float) -> None:
        if not lost_after_s > 0:
            raise ValueError(f"the cluster-lost timeout must be > 0 seconds, got {lost_after_s}")
        self.lost_after_s = lost_after_s
        self.book = DispatcherState()
        self.checks: dict[str, AdmissionCheck] = {}
        self.configs: dict[str, MultiKueueConfig] = {}
        self.declared: dict[str, MultiKueueCluster] = {}
        self.capacity: dict[str, ClusterCapacity] = {}  # the last heartbeat of each cluster
        self.seen_s: dict[str, float] = {}  # when it arrived
        self.started_s: float | None = None  # the first round as owner: a grace for heartbeats
        self.told: dict[WorkloadKey, tuple[str, str]] = {}  # check state and message published
        # The namespaces each cluster's watcher reported (none yet: not checked, as a
        # simulated cluster's): a workload goes only where its namespace exists.
        self.namespaces: dict[str, set[str]] = {}
        self._out: list[Outgoing] = []

    @property
    def holds(self) -> dict[WorkloadKey, tuple[str, Takes]]:
        return self.book.holds

    @property
    def fenced(self) -> dict[WorkloadKey, set[str]]:
        return self.book.fenced

    # --- the registry ------------------------------------------------------------------------

    def heartbeat(self, capacity: ClusterCapacity, *, now_s: float) -> None:
        """A cluster's gang-permit reported its room; holds it has caught up with end. One
        that says the cluster is unreachable is kept for its reason, but the cluster counts as
        silent: unreachable for longer than `lost_after_s`, it is lost. One too large to tell
        its room (`reached`) is heard: what runs there runs on, nothing new goes there."""
        name = capacity.cluster
        self.capacity[name] = capacity
        if not reached(capacity):
            return
        self.seen_s[name] = now_s
        self.book.down.discard(name)
        self.book.placed(capacity.placed, cluster=name)

    def forget_cluster(self, name: str) -> None:
        """Its heartbeat was deleted: no room known until it reports again."""
        self.capacity.pop(name, None)

    def wants_round(self) -> bool:
        """Whether a new heartbeat may let a waiting workload go."""
        return bool(self.book.waiting)

    def next_wakeup_s(self) -> float | None:
        """When a cluster that runs dispatched workloads turns lost if it stays silent."""
        if self.started_s is None or not self.declared:
            return None  # no worker cluster to watch (every round asks)
        started = self.started_s
        watched = [self.seen_s.get(c, started) for c in self.book.running() if c in self.declared]
        return min(watched) + self.lost_after_s if watched else None

    def is_lost(self, cluster: str, *, now_s: float) -> bool:
        if self.started_s is None:
            return False
        return now_s - self.seen_s.get(cluster, self.started_s) > self.lost_after_s

    # --- facts ---------------------------------------------------------------------------

    def admit_fact(self, fact: Fact, *, cluster: str) -> Fact | None:
        """`fact` as it counts when it came from `cluster`, or None when it does not count.

        A workload's pod facts count only from the cluster it was last admitted to; from a
        cluster it is fenced off, only that cluster's own `eviction_completed` matters, and it
        lifts the fence. MultiKueue checks are answered here, never by an event.
        """
        if not cluster:
            return fact  # origin unknown (a test, a tool): as before MultiKueue
        if isinstance(fact, PlacementPreempted):
            victims = tuple(v for v in fact.victims if self.book.counts(v, cluster, stops=False))
            return PlacementPreempted(fact.gang, victims) if victims else None
        if isinstance(fact, CheckUpdated):
            return None if fact.check in self.multikueue_checks else fact
        stops = isinstance(fact, Stopped)
        if isinstance(fact, WORKER_FACTS) and not self.book.counts(fact.key, cluster, stops=stops):
            return None
        return fact

    def observe(self, fact: Fact, *, cluster: str) -> None:
        """Fold in a fact that counted (any replica's decision included)."""
        match fact:
            case ApplyConfig(obj=AdmissionCheck() as check):
                self.checks[check.meta.name] = check
            case DeleteConfig(kind="AdmissionCheck", name=name):
                self.checks.pop(name, None)
            case ApplyConfig(obj=MultiKueueConfig() as config):
                self.configs[config.meta.name] = config
            case ApplyConfig(obj=MultiKueueCluster() as declared):
                self.declared[declared.meta.name] = declared
            case DeleteConfig(kind="MultiKueueConfig", name=name):
                self.configs.pop(name, None)
            case DeleteConfig(kind="MultiKueueCluster", name=name):
                self.declared.pop(name, None)
            case ApplyConfig(obj=Namespace() as namespace):
                self.namespaces.setdefault(cluster, set()).add(namespace.meta.name)
            case DeleteConfig(kind="Namespace", name=name):
                self.namespaces.get(cluster, set()).discard(name)
            case Recorded(kind="admitted", key=key) if cluster:
                self.book.target(key, cluster)
            case Recorded(kind="evicted", key=key, reason=reason) if reason == CLUSTER_LOST:
                self.book.evicted_for_loss(key, cluster)
            case Stopped(key=key):
                self.book.stopped(key)
                self.told.pop(key, None)  # a new reservation says its check's state again
            case Finish(key=key) | Delete(key=key):
                self.book.forget(key)
                self.told.pop(key, None)

    def target(self, key: WorkloadKey) -> str | None:
        return self.book.targets.get(key)

    def refused(
        self, engine: Engine, key: WorkloadKey, message: str, *, now_s: float
    ) -> list[Event]:
        """The cluster `key` was dispatched to refused to create it there (StartFailed): its
        check says Retry and why, it is evicted (AdmissionCheck) and requeued, and that
        cluster is passed over for it for a while (`muster.core.dispatcher.REFUSED_S`,
        doubling per refusal), as Kueue backs off a worker that fails."""
        cluster = self.book.targets.get(key)
        check = self._check_of(engine, key)
        if cluster is None or check is None:
            return []
        self.book.refuse(key, cluster, message, now_s=now_s)
        self._tell(key, check, RETRY, message, now_s=now_s)
        return engine.evict(key, reason=ADMISSION_CHECK, message=message, now_s=now_s)

    def _check_of(self, engine: Engine, key: WorkloadKey) -> str | None:
        """The MultiKueue check of `key`'s reservation."""
        record = engine.records.get(key)
        multikueue = self.multikueue_checks
        return next((c for c in sorted(record.checks) if c in multikueue), None) if record else None

    # --- decisions -----------------------------------------------------------------------

    def after_schedule(
        self, engine: Engine, events: Sequence[Event], *, now_s: float
    ) -> list[Event]:
        """Lose silent clusters, then dispatch what waits; the engine events this caused."""
        if self.started_s is None:
            self.started_s = now_s
            self._adopt_waiting(engine)
        if not self.book.waiting and not any(is_multikueue(c) for c in self.checks.values()):
            return []  # no MultiKueue here: nothing to do, at no cost per round
        for event in events:
            if event.type is EventType.QUOTA_RESERVED:
                self._wait(engine, WorkloadKey(event.object))
        out = self._lose(engine, now_s=now_s)
        out += self._dispatch(engine, now_s=now_s)
        return out

    @property
    def idle(self) -> bool:
        """Whether a round would dispatch nothing: started, no MultiKueue check, none waiting."""
        return (
            self.started_s is not None
            and not self.book.waiting
            and not any(is_multikueue(check) for check in self.checks.values())
        )

    @property
    def multikueue_checks(self) -> set[str]:
        return {name for name, check in self.checks.items() if is_multikueue(check)}

    def _adopt_waiting(self, engine: Engine) -> None:
        """After a rebuild: reservations whose MultiKueue check still waits, oldest first."""
        for key, record in engine.records.items():
            if record.phase.value == _RESERVED:
                self._wait(engine, key)

    def _wait(self, engine: Engine, key: WorkloadKey) -> None:
        record = engine.records.get(key)
        if record is None or key in self.book.waiting:
            return
        multikueue = self.multikueue_checks
        for check in sorted(record.checks):
            if check in multikueue and record.checks[check] == PENDING:
                self.book.wait(key, Waiting(checks=(check,)))
                return

    def _dispatch(self, engine: Engine, *, now_s: float) -> list[Event]:
        views = {name: self._view(name, now_s=now_s) for name in self.declared}
        decisions = self.book.dispatch_round(self._tries(engine), views, now_s=now_s)
        out: list[Event] = []
        for decision in decisions:
            key, check = decision.key, decision.checks[0]
            if not isinstance(decision, Sent):
                self._tell(key, check, PENDING, decision.message, now_s=now_s)
                continue
            self._tell(key, check, READY, decision.message, now_s=now_s)
            out += engine.set_admission_check(
                key, check, READY, message=decision.message, now_s=now_s
            )
        return out

    def _tries(self, engine: Engine) -> list[Try]:
        """The waiting reservations still waiting, with their routes and demands."""
        tries: list[Try] = []
        for key, waiting in list(self.book.waiting.items()):
            record = engine.records.get(key)
            check_name = waiting.checks[0]
            if record is None or record.phase.value != _RESERVED:
                del self.book.waiting[key]
                continue
            if record.checks.get(check_name) != PENDING:
                del self.book.waiting[key]
                continue
            check = self.checks.get(check_name)
            if check is None:
                gone = NoClusterFits(message="its AdmissionCheck is gone")
                tries.append(Try(key=key, route=gone))
                continue
            route = route_of(check, self.configs)
            if isinstance(route, NoClusterFits):
                tries.append(Try(key=key, route=route))
                continue
            if waiting.demand is None:
                admission = engine.admission(key)
                if admission is None:
                    continue
                wl = engine.workload(key)
                waiting.demand = demand_of(wl, admission, flavors=engine.config.flavors)
            tries.append(Try(key=key, route=route, demand=waiting.demand))
        return tries

    def _view(self, name: str, *, now_s: float) -> ClusterView:
        """A declared worker as its heartbeats show it now."""
        if name not in self.capacity:
            return ClusterView(unavailable="no heartbeat yet")
        why = self.capacity[name].unreachable
        if self.is_lost(name, now_s=now_s):
            return ClusterView(unavailable=f"lost: {why}" if why else "lost")
        if why and reached(self.capacity[name]):
            return ClusterView(unavailable=f"its room is not known: {why}")
        if why:
            return ClusterView(unavailable=f"not reachable now: {why}")
        return ClusterView(capacity=self.capacity[name], namespaces=self.namespaces.get(name))

    def _lose(self, engine: Engine, *, now_s: float) -> list[Event]:
        """Evict what runs on silent clusters; their pods are taken as gone (see the module)."""
        out: list[Event] = []
        for cluster in self.book.running():
            if cluster not in self.declared or not self.is_lost(cluster, now_s=now_s):
                continue
            why = self.capacity[cluster].unreachable if cluster in self.capacity else ""
            silent = (
                f"unreachable for over {self.lost_after_s:g}s: {why}"
                if why
                else f"no heartbeat for over {self.lost_after_s:g}s"
            )
            message = f"worker cluster {cluster} was lost: {silent}"
            for key in self.book.lose(cluster):
                phase = engine.phase(key)
                if key in self.book.lost or phase is None or not self._dispatched(engine, key):
                    continue  # another shard's, or a workload of that cluster's own queues
                if phase in _HOLDING:
                    out += engine.evict(key, reason=CLUSTER_LOST, message=message, now_s=now_s)
                elif phase != _EVICTING:
                    continue
                self.book.evicted_for_loss(key, cluster)
                self._out.append(
                    Outgoing("eviction_completed", pb.EvictionCompleted(), key, cluster, now_s)
                )
        return out

    def _dispatched(self, engine: Engine, key: WorkloadKey) -> bool:
        """Whether `key`'s ClusterQueue dispatches through a MultiKueue check."""
        record = engine.records.get(key)
        queue = engine.config.cluster_queues.get(record.cluster_queue) if record else None
        multikueue = self.multikueue_checks
        return queue is not None and any(r.name in multikueue for r in queue.admission_checks)

    def _tell(
        self, key: WorkloadKey, check: str, state: str, message: str, *, now_s: float
    ) -> None:
        """Publish the check's state and message when they change (admission_check)."""
        if self.told.get(key) == (state, message):
            return
        self.told[key] = (state, message)
        payload = pb.AdmissionCheckUpdated(check=check, state=state, message=message)
        self._out.append(Outgoing("admission_check", payload, key, "", now_s))

    def take_decisions(self, ctx: DecisionContext) -> list[Decision]:
        """What this replica publishes beyond the engine's events, in the order decided."""
        if not self._out:
            return []
        out, self._out = self._out, []
        return [
            Decision(
                field=o.field,
                payload=o.payload,
                workload=o.key,
                cluster=o.cluster or ctx.cluster_of(o.key),
                generation=ctx.generation_of(o.key),
                time_s=o.time_s,
                submitted_id=ctx.submitted_id_of(o.key),
            )
            for o in out
        ]
