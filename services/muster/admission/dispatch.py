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

Every replica folds the same stream through `observe`, so all of them agree on targets and
fences; only the owner of a workload's cohort tree decides for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import Message

from muster.admission.translate import (
    ApplyConfig,
    CheckUpdated,
    Decision,
    DecisionContext,
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
    Candidate,
    ClusterCapacity,
    Demand,
    Dispatched,
    Route,
    Takes,
    demand_of,
    dispatch,
    is_multikueue,
    minus,
    route_of,
)
from muster.core.engine import Engine
from muster.core.events import Event, EventType

READY, PENDING, RETRY = "Ready", "Pending", "Retry"
# A worker that refused to create a workload is passed over for it this long, doubling per
# refusal up to REFUSED_MAX_S (Kueue's MultiKueue: 5 s steps up to about 5 minutes).
REFUSED_S, REFUSED_MAX_S = 5.0, 320.0
_RESERVED = "QuotaReserved"  # the engine's Phase values this module reads
_HOLDING = frozenset({"QuotaReserved", "Admitted"})
_EVICTING = "Evicting"
WORKER_FACTS = (Finish, Stopped, PodsReady, GangRejected, RequestsRefused)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """An event to publish that no engine event stands for."""

    field: str
    payload: Message
    key: WorkloadKey
    cluster: str  # "" for the workload's cluster when published
    time_s: float


@dataclass(slots=True)
class Waiting:
    """A reservation whose MultiKueue check waits for a cluster."""

    check: str
    demand: Demand | None = None  # computed on the first try


class Dispatcher:
    """Targets, holds, fences and the cluster registry of one admission replica."""

    def __init__(self, *, lost_after_s: float) -> None:
        if not lost_after_s > 0:
            raise ValueError(f"the cluster-lost timeout must be > 0 seconds, got {lost_after_s}")
        self.lost_after_s = lost_after_s
        self.checks: dict[str, AdmissionCheck] = {}
        self.configs: dict[str, MultiKueueConfig] = {}
        self.declared: dict[str, MultiKueueCluster] = {}
        self.capacity: dict[str, ClusterCapacity] = {}  # the last heartbeat of each cluster
        self.seen_s: dict[str, float] = {}  # when it arrived
        self.started_s: float | None = None  # the first round as owner: a grace for heartbeats
        self.waiting: dict[WorkloadKey, Waiting] = {}  # in order of reservation
        self.targets: dict[WorkloadKey, str] = {}  # where a workload's pods may be now
        self.on: dict[str, set[WorkloadKey]] = {}  # the same, by cluster
        self.down: set[str] = set()  # lost, and what ran there evicted
        self.last: dict[WorkloadKey, str] = {}  # the cluster of its last admission
        self.holds: dict[WorkloadKey, tuple[str, Takes]] = {}
        self.lost: dict[WorkloadKey, str] = {}  # evicted for a lost cluster, not stopped yet
        self.fenced: dict[WorkloadKey, set[str]] = {}
        self.told: dict[WorkloadKey, tuple[str, str]] = {}  # check state and message published
        # The namespaces each cluster's watcher reported (none yet: not checked, as a
        # simulated cluster's): a workload goes only where its namespace exists.
        self.namespaces: dict[str, set[str]] = {}
        # (workload, cluster) → (refusals so far, passed over until, why): the owner's own,
        # not rebuilt (after a restart a refusing cluster is tried, and refuses, once more).
        self.refusals: dict[tuple[WorkloadKey, str], tuple[int, float, str]] = {}
        self._out: list[Outgoing] = []

    # --- the registry ------------------------------------------------------------------------

    def heartbeat(self, capacity: ClusterCapacity, *, now_s: float) -> None:
        """A cluster's gang-permit reported its room; holds it has caught up with end. One
        that says the cluster is unreachable is kept for its reason, but the cluster counts as
        silent: unreachable for longer than `lost_after_s`, it is lost."""
        name = capacity.cluster
        self.capacity[name] = capacity
        if capacity.unreachable:
            return
        self.seen_s[name] = now_s
        self.down.discard(name)
        placed = set(capacity.placed)
        for key, (cluster, _) in list(self.holds.items()):
            if cluster == name and key in placed:
                del self.holds[key]

    def forget_cluster(self, name: str) -> None:
        """Its heartbeat was deleted: no room known until it reports again."""
        self.capacity.pop(name, None)

    def wants_round(self) -> bool:
        """Whether a new heartbeat may let a waiting workload go."""
        return bool(self.waiting)

    def next_wakeup_s(self) -> float | None:
        """When a cluster that runs dispatched workloads turns lost if it stays silent."""
        if self.started_s is None:
            return None
        started = self.started_s
        watched = [
            self.seen_s.get(c, started)
            for c, keys in self.on.items()
            if keys and c in self.declared and c not in self.down
        ]
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
            victims = tuple(v for v in fact.victims if self._counts(v, cluster, fact))
            return PlacementPreempted(fact.gang, victims) if victims else None
        if isinstance(fact, CheckUpdated):
            return None if fact.check in self.multikueue_checks else fact
        if isinstance(fact, WORKER_FACTS) and not self._counts(fact.key, cluster, fact):
            return None
        return fact

    def _counts(self, key: WorkloadKey, cluster: str, fact: Fact) -> bool:
        fences = self.fenced.get(key)
        if fences is not None and cluster in fences:
            if isinstance(fact, Stopped):  # the lost cluster carried out the eviction
                fences.discard(cluster)
                if not fences:
                    del self.fenced[key]
            return False
        expected = self.last.get(key)
        return expected is None or expected == cluster

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
                self._target(key, cluster)
            case Recorded(kind="evicted", key=key, reason=reason) if reason == CLUSTER_LOST:
                self.lost[key] = cluster
            case Stopped(key=key):
                self._stopped(key)
            case Finish(key=key) | Delete(key=key):
                self._stopped(key)
                self.last.pop(key, None)
                self.fenced.pop(key, None)
                self.told.pop(key, None)
                for refusal in [r for r in self.refusals if r[0] == key]:
                    del self.refusals[refusal]

    def _stopped(self, key: WorkloadKey) -> None:
        """Its pods are gone: no target, no hold; off a lost cluster until that one agrees."""
        old = self.targets.pop(key, None)
        if old is not None:
            self.on[old].discard(key)
        self.holds.pop(key, None)
        self.waiting.pop(key, None)
        self.told.pop(key, None)  # a new reservation says its check's state again
        lost = self.lost.pop(key, None)
        if lost is not None:
            self.fenced.setdefault(key, set()).add(lost)

    def target(self, key: WorkloadKey) -> str | None:
        return self.targets.get(key)

    def refused(
        self, engine: Engine, key: WorkloadKey, message: str, *, now_s: float
    ) -> list[Event]:
        """The cluster `key` was dispatched to refused to create it there (StartFailed): its
        check says Retry and why, it is evicted (AdmissionCheck) and requeued, and that
        cluster is passed over for it for a while (`REFUSED_S`, doubling per refusal), as
        Kueue backs off a worker that fails."""
        cluster = self.targets.get(key)
        check = self._check_of(engine, key)
        if cluster is None or check is None:
            return []
        count, _, _ = self.refusals.get((key, cluster), (0, 0.0, ""))
        delay_s = min(REFUSED_S * 2**count, REFUSED_MAX_S)
        self.refusals[(key, cluster)] = (count + 1, now_s + delay_s, message)
        self._tell(key, check, RETRY, message, now_s=now_s)
        return engine.evict(key, reason=ADMISSION_CHECK, message=message, now_s=now_s)

    def _check_of(self, engine: Engine, key: WorkloadKey) -> str | None:
        """The MultiKueue check of `key`'s reservation."""
        record = engine.records.get(key)
        multikueue = self.multikueue_checks
        return next((c for c in sorted(record.checks) if c in multikueue), None) if record else None

    def _target(self, key: WorkloadKey, cluster: str) -> None:
        old = self.targets.get(key)
        if old is not None:
            self.on[old].discard(key)
        self.targets[key] = self.last[key] = cluster
        self.on.setdefault(cluster, set()).add(key)

    # --- decisions -----------------------------------------------------------------------

    def after_schedule(
        self, engine: Engine, events: Sequence[Event], *, now_s: float
    ) -> list[Event]:
        """Lose silent clusters, then dispatch what waits; the engine events this caused."""
        if self.started_s is None:
            self.started_s = now_s
            self._adopt_waiting(engine)
        if not self.waiting and not any(is_multikueue(check) for check in self.checks.values()):
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
            and not self.waiting
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
        if record is None or key in self.waiting:
            return
        multikueue = self.multikueue_checks
        for check in sorted(record.checks):
            if check in multikueue and record.checks[check] == PENDING:
                self.waiting[key] = Waiting(check=check)
                return

    def _dispatch(self, engine: Engine, *, now_s: float) -> list[Event]:
        out: list[Event] = []
        room: dict[str, ClusterCapacity | None] = {}
        for key, waiting in list(self.waiting.items()):
            record = engine.records.get(key)
            if record is None or record.phase.value != _RESERVED:
                del self.waiting[key]
                continue
            if record.checks.get(waiting.check) != PENDING:
                del self.waiting[key]
                continue
            check = self.checks.get(waiting.check)
            route = route_of(check, self.configs) if check is not None else None
            if not isinstance(route, Route):
                message = route.message if route is not None else "its AdmissionCheck is gone"
                self._tell(key, waiting.check, PENDING, message, now_s=now_s)
                continue
            if waiting.demand is None:
                admission = engine.admission(key)
                if admission is None:
                    continue
                wl = engine.workload(key)
                waiting.demand = demand_of(wl, admission, flavors=engine.config.flavors)
            candidates = [self._candidate(name, key, room, now_s=now_s) for name in route.clusters]
            outcome = dispatch(waiting.demand, candidates, strategy=route.strategy)
            if not isinstance(outcome, Dispatched):
                self._tell(key, waiting.check, PENDING, outcome.message, now_s=now_s)
                continue
            del self.waiting[key]
            self._target(key, outcome.cluster)
            if outcome.takes:
                self.holds[key] = (outcome.cluster, outcome.takes)
                held = room.get(outcome.cluster)
                if held is not None:
                    room[outcome.cluster] = minus(held, [outcome.takes])
            self._tell(key, waiting.check, READY, outcome.message, now_s=now_s)
            out += engine.set_admission_check(
                key, waiting.check, READY, message=outcome.message, now_s=now_s
            )
        return out

    def _candidate(
        self,
        name: str,
        key: WorkloadKey,
        room: dict[str, ClusterCapacity | None],
        *,
        now_s: float,
    ) -> Candidate:
        if name not in self.declared:
            return Candidate(cluster=name, unavailable="no MultiKueueCluster")
        if name in self.fenced.get(key, ()):
            return Candidate(cluster=name, unavailable="still stopping it there")
        _, until_s, why = self.refusals.get((key, name), (0, 0.0, ""))
        if until_s > now_s:
            return Candidate(cluster=name, unavailable=f"refused it ({why})")
        if name not in self.capacity:
            return Candidate(cluster=name, unavailable="no heartbeat yet")
        why = self.capacity[name].unreachable
        if self.is_lost(name, now_s=now_s):
            return Candidate(cluster=name, unavailable=f"lost: {why}" if why else "lost")
        if why:
            return Candidate(cluster=name, unavailable=f"not reachable now: {why}")
        namespaces = self.namespaces.get(name)
        if namespaces is not None and key.partition("/")[0] not in namespaces:
            missing = f"namespace {key.partition('/')[0]} does not exist there"
            return Candidate(cluster=name, unavailable=missing)
        if name not in room:
            held = [takes for c, takes in self.holds.values() if c == name]
            room[name] = minus(self.capacity[name], held)
        return Candidate(cluster=name, capacity=room[name])

    def _lose(self, engine: Engine, *, now_s: float) -> list[Event]:
        """Evict what runs on silent clusters; their pods are taken as gone (see the module)."""
        out: list[Event] = []
        for cluster in sorted(self.on):
            if cluster not in self.declared or cluster in self.down:
                continue
            if not self.on[cluster] or not self.is_lost(cluster, now_s=now_s):
                continue
            self.down.add(cluster)
            why = self.capacity[cluster].unreachable if cluster in self.capacity else ""
            silent = (
                f"unreachable for over {self.lost_after_s:g}s: {why}"
                if why
                else f"no heartbeat for over {self.lost_after_s:g}s"
            )
            message = f"worker cluster {cluster} was lost: {silent}"
            for key in sorted(self.on[cluster]):
                phase = engine.phase(key)
                if key in self.lost or phase is None or not self._dispatched(engine, key):
                    continue  # another shard's, or a workload of that cluster's own queues
                if phase in _HOLDING:
                    out += engine.evict(key, reason=CLUSTER_LOST, message=message, now_s=now_s)
                elif phase != _EVICTING:
                    continue
                self.lost[key] = cluster
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
        out, self._out = self._out, []
        return [
            Decision(
                field=o.field,
                payload=o.payload,
                workload=o.key,
                cluster=o.cluster or ctx.cluster_of(o.key),
                generation=ctx.generation_of(o.key),
                time_s=o.time_s,
            )
            for o in out
        ]
