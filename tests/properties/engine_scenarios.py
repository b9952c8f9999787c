"""Random clusters and arrival streams for the engine's property tests, and the loop to play them.

Objects are built directly from the model structs by keyword factories (`cluster_queue`,
`cohort`, `workload`, ...); `scenarios()` draws a cohort forest, queues and workloads;
`play()` submits at arrival, schedules, finishes each workload its run time after its quota
was reserved (cancelled by an eviction) and records every engine call with what held quota after.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from hypothesis import strategies as st

from muster.api.model import (
    Admission,
    ApiObject,
    BorrowWithinCohort,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    Cohort,
    FairSharingConfig,
    FlavorQuotas,
    KueueConfig,
    LabelSelector,
    LocalQueue,
    ObjectMeta,
    PodSet,
    Preemption,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from muster.core.engine import Engine
from muster.core.events import Event, EventType

NAMESPACE = "ns"
FLAVORS = ("default", "spot")
CPU = 1000  # milli-units in one cpu
FlavorResource = tuple[str, str]


class Quota(NamedTuple):
    """One (flavor, resource) of a ClusterQueue or Cohort."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


# --- factories -------------------------------------------------------------------------------


def resource_groups(quotas: Mapping[FlavorResource, Quota]) -> tuple[ResourceGroup, ...]:
    """One resource group covering every resource named, flavors in `FLAVORS` order."""
    resources = sorted({r for _, r in quotas})
    flavors = [f for f in FLAVORS if any(fr[0] == f for fr in quotas)]
    if not quotas:
        return ()
    return (
        ResourceGroup(
            covered_resources=tuple(resources),
            flavors=tuple(
                FlavorQuotas(
                    name=f,
                    resources=tuple(
                        ResourceQuota(
                            name=r,
                            nominal_quota=quotas.get((f, r), Quota(0)).nominal,
                            borrowing_limit=quotas.get((f, r), Quota(0)).borrowing_limit,
                            lending_limit=quotas.get((f, r), Quota(0)).lending_limit,
                        )
                        for r in resources
                    ),
                )
                for f in flavors
            ),
        ),
    )


def cluster_queue(
    name: str,
    *,
    cpu: int = 0,
    cohort: str | None = None,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    preemption: Preemption | None = None,
    quotas: Mapping[FlavorResource, Quota] | None = None,
) -> ClusterQueue:
    """A ClusterQueue open to every namespace; `cpu` (milli) in flavor default unless `quotas`."""
    if quotas is None:
        quotas = {("default", "cpu"): Quota(cpu, borrowing_limit, lending_limit)}
    return ClusterQueue(
        meta=ObjectMeta(name=name),
        cohort=cohort,
        resource_groups=resource_groups(quotas),
        queueing_strategy=strategy,
        namespace_selector=LabelSelector(),
        preemption=preemption or Preemption(),
    )


def cohort(
    name: str, *, parent: str | None = None, quotas: Mapping[FlavorResource, Quota] | None = None
) -> Cohort:
    return Cohort(
        meta=ObjectMeta(name=name), parent=parent, resource_groups=resource_groups(quotas or {})
    )


def local_queue(cq: str, *, name: str | None = None) -> LocalQueue:
    """The LocalQueue `lq-<cq>` in namespace `ns`, pointing at `cq`."""
    return LocalQueue(
        meta=ObjectMeta(name=name or f"lq-{cq}", namespace=NAMESPACE), cluster_queue=cq
    )


def flavors() -> list[ResourceFlavor]:
    return [ResourceFlavor(meta=ObjectMeta(name=f)) for f in FLAVORS]


def pod_set(
    name: str = "main",
    *,
    cpu: int = CPU,
    memory: int = 0,
    count: int = 1,
    min_count: int | None = None,
) -> PodSet:
    requests = {"cpu": cpu} | ({"memory": memory} if memory else {})
    return PodSet(name=name, count=count, min_count=min_count, requests=requests)


def workload(
    name: str,
    *,
    cpu: int = CPU,
    count: int = 1,
    queue: str = "lq-q0",
    priority: int | None = None,
    pod_sets: Sequence[PodSet] | None = None,
) -> Workload:
    """A workload in namespace `ns`: one podset of `count` pods of `cpu` milli-cpu unless given."""
    return Workload(
        meta=ObjectMeta(name=name, namespace=NAMESPACE),
        queue_name=queue,
        pod_sets=tuple(pod_sets) if pod_sets else (pod_set(cpu=cpu, count=count),),
        priority=priority,
    )


# --- scenarios -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    workload: Workload
    at_s: int
    runs_s: int


@dataclass(frozen=True)
class Scenario:
    objects: tuple[ApiObject, ...]
    config: KueueConfig
    arrivals: tuple[Arrival, ...]  # in submission order: arrival time, then position

    def cluster_queue_of(self, wl: Workload) -> str | None:
        for obj in self.objects:
            if isinstance(obj, LocalQueue) and obj.meta.name == wl.queue_name:
                return obj.cluster_queue
        return None

    def cluster_queues(self) -> dict[str, ClusterQueue]:
        return {o.name: o for o in self.objects if isinstance(o, ClusterQueue)}


PRIORITIES = (None, 0, 1, 2, 5)
PRIORITY_VALUES = (0, 1, 2, 5)


def _limit(draw: st.DrawFn, most: int) -> int | None:
    return draw(st.none() | st.integers(0, most // 500).map(lambda n: n * 500))


@st.composite
def _quotas(
    draw: st.DrawFn, *, flavor_names: Sequence[str], resources: Sequence[str], limits: bool
) -> dict[FlavorResource, Quota]:
    quotas: dict[FlavorResource, Quota] = {}
    for f in flavor_names:
        for r in resources:
            nominal = draw(st.integers(0, 12)) * 500
            borrowing = _limit(draw, 4 * CPU) if limits else None
            lending = _limit(draw, nominal) if limits else None
            quotas[(f, r)] = Quota(nominal, borrowing, lending)
    return quotas


@st.composite
def preemptions(draw: st.DrawFn) -> Preemption:
    """A random valid policy: borrowWithinCohort only where reclaimWithinCohort is on (Kueue)."""
    within = draw(st.sampled_from(WithinClusterQueue))
    reclaim = draw(st.sampled_from(ReclaimWithinCohort))
    borrow = BorrowWithinCohort()
    if reclaim is not ReclaimWithinCohort.NEVER and draw(st.booleans()):
        threshold = draw(st.none() | st.sampled_from(PRIORITY_VALUES))
        borrow = BorrowWithinCohort(
            policy=BorrowWithinCohortPolicy.LOWER_PRIORITY, max_priority_threshold=threshold
        )
    return Preemption(
        within_cluster_queue=within, reclaim_within_cohort=reclaim, borrow_within_cohort=borrow
    )


@st.composite
def clusters(
    draw: st.DrawFn,
    *,
    max_cohorts: int = 3,
    max_queues: int = 4,
    preemption: bool = True,
    strategy: QueueingStrategy | None = None,
    shared: bool = False,
) -> tuple[list[ApiObject], KueueConfig]:
    """A cohort forest: Cohort objects (with parents and quota) or implicit cohorts, queues.

    `shared`: every ClusterQueue is in a cohort (when there is one), for contention.
    """
    resources = draw(st.sampled_from([("cpu",), ("cpu",), ("cpu", "memory")]))
    objects: list[ApiObject] = [*flavors()]
    names = [f"c{i}" for i in range(draw(st.integers(min(1, max_cohorts), max_cohorts)))]
    for i, name in enumerate(names):
        if not draw(st.booleans()):
            continue  # implicit: exists because a queue names it, no parent, no quota
        parent = draw(st.none() | st.sampled_from(names[:i])) if i else None
        quotas = {}
        if draw(st.booleans()):
            fl = draw(st.sampled_from([FLAVORS[:1], FLAVORS]))
            quotas = draw(_quotas(flavor_names=fl, resources=resources, limits=parent is not None))
        objects.append(cohort(name, parent=parent, quotas=quotas))
    for i in range(draw(st.integers(1, max_queues))):
        choices = names if shared else [None, *names, *names]
        in_cohort = draw(st.sampled_from(choices)) if names else None
        fl = draw(st.sampled_from([FLAVORS[:1], FLAVORS[:1], FLAVORS]))
        quotas = draw(_quotas(flavor_names=fl, resources=resources, limits=in_cohort is not None))
        objects.append(
            cluster_queue(
                f"q{i}",
                cohort=in_cohort,
                quotas=quotas,
                strategy=strategy or draw(st.sampled_from(QueueingStrategy)),
                preemption=draw(preemptions()) if preemption else None,
            )
        )
        objects.append(local_queue(f"q{i}"))
    fair = preemption and draw(st.booleans())
    return objects, KueueConfig(fair_sharing=FairSharingConfig(enable=fair))


@st.composite
def arrivals(
    draw: st.DrawFn, *, queues: Sequence[str], resources: Sequence[str], max_workloads: int = 10
) -> tuple[Arrival, ...]:
    """Workloads with 1-2 podsets, counts, optional minCount, priorities and run times."""
    found: list[Arrival] = []
    for i in range(draw(st.integers(min(2, max_workloads), max_workloads))):
        sets = []
        for ps in ("main", "aux")[: draw(st.integers(1, 2))]:
            count = draw(st.integers(1, 3))
            min_count = draw(st.none() | st.integers(1, count - 1)) if count > 1 else None
            memory = (
                draw(st.integers(1, 3)) * CPU
                if "memory" in resources and draw(st.booleans())
                else 0
            )
            cpu = draw(st.integers(1, 3)) * 500
            sets.append(pod_set(ps, cpu=cpu, memory=memory, count=count, min_count=min_count))
        wl = workload(
            f"w{i:02d}",
            queue=draw(st.sampled_from(queues)),
            priority=draw(st.sampled_from(PRIORITIES)),
            pod_sets=sets,
        )
        found.append(Arrival(wl, at_s=draw(st.integers(0, 8)), runs_s=draw(st.integers(1, 20))))
    return tuple(sorted(found, key=lambda a: a.at_s))


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    max_cohorts: int = 3,
    max_queues: int = 4,
    preemption: bool = True,
    strategy: QueueingStrategy | None = None,
    max_workloads: int = 12,
    shared: bool = False,
) -> Scenario:
    """A cluster from `clusters()` and an arrival stream over its LocalQueues."""
    objects, config = draw(
        clusters(
            max_cohorts=max_cohorts,
            max_queues=max_queues,
            preemption=preemption,
            strategy=strategy,
            shared=shared,
        )
    )
    queues = [o.meta.name for o in objects if isinstance(o, LocalQueue)]
    resources = sorted(
        {
            r
            for o in objects
            if isinstance(o, ClusterQueue)
            for g in o.resource_groups
            for r in g.covered_resources
        }
    )
    return Scenario(
        objects=tuple(objects),
        config=config,
        arrivals=draw(
            arrivals(queues=queues, resources=resources or ["cpu"], max_workloads=max_workloads)
        ),
    )


# --- playing a scenario ----------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One engine call: what it was, the events it returned, and who held quota afterwards."""

    call: str  # "submit" | "schedule" | "finish" | "stopped"
    now_s: float
    target: str  # the workload submitted or finished; "" for schedule
    events: tuple[Event, ...]
    held: Mapping[str, Admission]


@dataclass(frozen=True)
class Trace:
    steps: tuple[Step, ...]
    engine: Engine


def holds_quota(wl: Workload) -> bool:
    """True if the status says `wl` holds quota: admitted (status.admission) and not finished.

    Kueue keeps status.admission on a finished workload, but its quota is free again.
    """
    finished = any(c.type == "Finished" and c.status == "True" for c in wl.conditions)
    return wl.admission is not None and not finished


RELEASING = frozenset({EventType.EVICTED, EventType.FINISHED, EventType.DEACTIVATED})


def play(scn: Scenario, *, max_steps: int = 1000, stop_after_s: int | None = None) -> Trace:
    """Run `scn` until nothing arrives and nothing runs; fail if it does not settle.

    `stop_after_s`: run the engine as the services do (hold_quota_until_stopped), an evicted
    workload's pods stopping that long after its eviction.
    """
    hold = stop_after_s is not None
    engine = Engine(scn.objects, config=scn.config, hold_quota_until_stopped=hold)
    runs: dict[str, int] = {a.workload.key: a.runs_s for a in scn.arrivals}
    waiting = deque(scn.arrivals)
    due: dict[str, float] = {}  # running workload -> when it finishes
    stopping: dict[str, float] = {}  # evicted workload -> when its pods are gone
    steps: list[Step] = []

    def record(call: str, now_s: float, target: str, events: list[Event]) -> None:
        for e in events:
            if e.type is EventType.QUOTA_RESERVED:
                due[e.object] = now_s + runs[e.object]
            elif e.type in RELEASING:
                due.pop(e.object, None)
                if hold and e.type is EventType.EVICTED:
                    stopping[e.object] = now_s + (stop_after_s or 0)
        held: dict[str, Admission] = {
            w.key: w.admission
            for w in engine.workloads()
            if holds_quota(w) and w.admission is not None
        }
        steps.append(Step(call, now_s, target, tuple(events), held))

    while waiting or due or stopping:
        now = min([*due.values(), *stopping.values(), *([waiting[0].at_s] if waiting else [])])
        for key in sorted(k for k, at in stopping.items() if at <= now):
            del stopping[key]
            record("stopped", now, key, engine.stopped(WorkloadKey(key), now_s=now))
        for key in sorted(k for k, at in due.items() if at <= now):
            record("finish", now, key, engine.finish(WorkloadKey(key), now_s=now))
        while waiting and waiting[0].at_s <= now:
            wl = waiting.popleft().workload
            record("submit", now, wl.key, engine.submit(wl, now_s=now))
        record("schedule", now, "", engine.schedule(now_s=now))
        assert len(steps) <= max_steps, f"no steady state after {max_steps} engine calls"
    return Trace(steps=tuple(steps), engine=engine)
