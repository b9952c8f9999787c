"""Kueue's scalability test configurations, generated as model objects on the virtual clock.

Every ClusterQueue has one flavor ("default") with 20 cpu nominal and a borrowing limit of
100 cpu, BestEffortFIFO, `reclaimWithinCohort: Any` and `withinClusterQueue: LowerPriority`;
it sits in a cohort of its configuration's size and serves one LocalQueue ("main") in a
namespace of its own. Each ClusterQueue gets the same three classes of one-pod workloads.
muster's own `hierarchical-fair` nests Cohorts below each root and turns fair sharing on.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from muster.api.model import (
    ApiObject,
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
from muster.sim.annotations import RUN_SECONDS, SUBMIT_AFTER

FLAVOR = "default"
LOCAL_QUEUE = "main"
POD_SET = "main"
CPU = "cpu"
MILLI_PER_CPU = 1000


class WorkloadClass(msgspec.Struct, frozen=True, kw_only=True):
    """One class of workloads, created per ClusterQueue: `count` of them, one every interval."""

    name: str
    count: int  # per ClusterQueue, before scaling
    cpu_milli: int
    run_ms: int
    priority: int
    interval_ms: int  # arrival of the i-th is i * interval_ms, from t=0


class PerfConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One of Kueue's performance test configurations."""

    name: str
    cohorts: int
    cluster_queues_per_cohort: int
    nominal_cpu_milli: int = 20 * MILLI_PER_CPU
    borrowing_limit_cpu_milli: int = 100 * MILLI_PER_CPU
    classes: tuple[WorkloadClass, ...]
    # Cohorts nested below each root: (4, 5) is 4 children per root, 5 per child, the
    # ClusterQueues under the last level; () puts them straight under the root.
    sub_cohorts: tuple[int, ...] = ()
    fair_sharing: bool = False

    @property
    def cluster_queues_per_root(self) -> int:
        n = self.cluster_queues_per_cohort
        for fan_out in self.sub_cohorts:
            n *= fan_out
        return n


Triple = tuple[int, int, int]  # small, medium, large


def three_classes(
    *, counts: Triple, runs_ms: Triple, intervals_ms: Triple
) -> tuple[WorkloadClass, ...]:
    """Small (1 cpu, priority 50), medium (5 cpu, 100) and large (20 cpu, 200)."""
    shapes = (("small", 1, 50), ("medium", 5, 100), ("large", 20, 200))
    return tuple(
        WorkloadClass(
            name=name,
            count=count,
            cpu_milli=cpu * MILLI_PER_CPU,
            run_ms=run_ms,
            priority=priority,
            interval_ms=interval_ms,
        )
        for (name, cpu, priority), count, run_ms, interval_ms in zip(
            shapes, counts, runs_ms, intervals_ms, strict=True
        )
    )


BASELINE = PerfConfig(
    name="baseline",
    cohorts=5,
    cluster_queues_per_cohort=6,
    classes=three_classes(
        counts=(350, 100, 50), runs_ms=(200, 500, 1000), intervals_ms=(100, 500, 1200)
    ),
)
LARGE_SCALE = PerfConfig(
    name="large-scale",
    cohorts=10,
    cluster_queues_per_cohort=100,
    classes=three_classes(counts=(35, 11, 4), runs_ms=(150, 350, 700), intervals_ms=(60, 300, 700)),
)
# Not one of Kueue's: the large-scale load over cohorts three levels deep with fair sharing on
# (5 roots x 4 x 5 Cohorts x 10 ClusterQueues = 1 000 ClusterQueues, 50 000 workloads).
HIERARCHICAL_FAIR = PerfConfig(
    name="hierarchical-fair",
    cohorts=5,
    cluster_queues_per_cohort=10,
    sub_cohorts=(4, 5),
    fair_sharing=True,
    classes=LARGE_SCALE.classes,
)
CONFIGS: Mapping[str, PerfConfig] = {c.name: c for c in (BASELINE, LARGE_SCALE, HIERARCHICAL_FAIR)}


class PlannedWorkload(msgspec.Struct, frozen=True, kw_only=True):
    """What the generator knows about one workload; the metrics read nothing else."""

    key: WorkloadKey
    workload_class: str
    cluster_queue: str
    cohort: str
    cpu_milli: int
    arrival_s: float
    run_s: float = 0.0  # how long it runs once admitted (0: unknown)


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """The objects of one run and what the metrics need to know about them."""

    config: str
    scale: float
    objects: tuple[ApiObject, ...]  # flavor, ClusterQueues, LocalQueues, then workloads
    workloads: tuple[PlannedWorkload, ...]  # in the order of `objects`
    cluster_queues: int
    cohort_nominal_milli: Mapping[str, int]  # cohort -> summed nominal cpu of its members
    classes: tuple[str, ...]  # class names, in the configuration's order


def scaled_count(count: int, scale: float) -> int:
    """`count * scale`, rounded, and at least 1, so a tiny scale still runs every class."""
    return max(1, round(count * scale))


def generate(config: PerfConfig, *, scale: float = 1.0) -> Plan:
    """Build every object of `config`, with each class's count scaled by `scale`.

    Scaling keeps the quota tree and the arrival intervals, so the load per ClusterQueue is
    the same, only shorter. Deterministic: the same arguments give equal objects.
    """
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    objects: list[ApiObject] = [ResourceFlavor(meta=ObjectMeta(name=FLAVOR))]
    if config.fair_sharing:
        objects.append(KueueConfig(fair_sharing=FairSharingConfig(enable=True)))
    workloads: list[Workload] = []
    planned: list[PlannedWorkload] = []
    nominal: dict[str, int] = {}
    for c in range(config.cohorts):
        root = f"cohort-{c}"
        nominal[root] = config.cluster_queues_per_root * config.nominal_cpu_milli
        leaves = _nested_cohorts(root, config.sub_cohorts, objects)
        for q in range(config.cluster_queues_per_root):
            cq_name, namespace = f"cq-{c}-{q}", f"ns-{c}-{q}"
            cohort = leaves[q // config.cluster_queues_per_cohort]
            objects.append(cluster_queue(config, name=cq_name, cohort=cohort))
            objects.append(
                LocalQueue(
                    meta=ObjectMeta(name=LOCAL_QUEUE, namespace=namespace), cluster_queue=cq_name
                )
            )
            for wc in config.classes:
                for i in range(scaled_count(wc.count, scale)):
                    wl = workload(wc, namespace=namespace, index=i)
                    workloads.append(wl)
                    planned.append(
                        PlannedWorkload(
                            key=wl.key,
                            workload_class=wc.name,
                            cluster_queue=cq_name,
                            cohort=root,
                            cpu_milli=wc.cpu_milli,
                            arrival_s=float(wl.meta.annotations[SUBMIT_AFTER]),
                            run_s=wc.run_ms / 1000,
                        )
                    )
    return Plan(
        config=config.name,
        scale=scale,
        objects=(*objects, *workloads),
        workloads=tuple(planned),
        cluster_queues=config.cohorts * config.cluster_queues_per_root,
        cohort_nominal_milli=nominal,
        classes=tuple(wc.name for wc in config.classes),
    )


def _nested_cohorts(root: str, fan_outs: tuple[int, ...], objects: list[ApiObject]) -> list[str]:
    """Add the Cohorts below `root` (`fan_outs[i]` children per Cohort at depth i) to
    `objects`; the names of the deepest level, in order (just `root` without nesting)."""
    level = [root]
    for depth, fan_out in enumerate(fan_outs):
        below = []
        for parent in level:
            for i in range(fan_out):
                name = f"{parent}-{i}" if depth else f"{root}-{i}"
                objects.append(Cohort(meta=ObjectMeta(name=name), parent=parent))
                below.append(name)
        level = below
    return level


def cluster_queue(config: PerfConfig, *, name: str, cohort: str) -> ClusterQueue:
    """One ClusterQueue of `config`: one flavor, cpu only, matching every namespace."""
    quota = ResourceQuota(
        name=CPU,
        nominal_quota=config.nominal_cpu_milli,
        borrowing_limit=config.borrowing_limit_cpu_milli,
    )
    return ClusterQueue(
        meta=ObjectMeta(name=name),
        cohort=cohort,
        resource_groups=(
            ResourceGroup(
                covered_resources=(CPU,),
                flavors=(FlavorQuotas(name=FLAVOR, resources=(quota,)),),
            ),
        ),
        queueing_strategy=QueueingStrategy.BEST_EFFORT_FIFO,
        namespace_selector=LabelSelector(),
        preemption=Preemption(
            within_cluster_queue=WithinClusterQueue.LOWER_PRIORITY,
            reclaim_within_cohort=ReclaimWithinCohort.ANY,
        ),
    )


def workload(wc: WorkloadClass, *, namespace: str, index: int) -> Workload:
    """The `index`-th workload of class `wc` in `namespace`, scripted by annotations."""
    # Integer milliseconds divided once, so "34.9" and not "34.900000000000006".
    arrival = str(index * wc.interval_ms / 1000)
    return Workload(
        meta=ObjectMeta(
            name=f"{wc.name}-{index}",
            namespace=namespace,
            annotations={SUBMIT_AFTER: arrival, RUN_SECONDS: str(wc.run_ms / 1000)},
        ),
        queue_name=LOCAL_QUEUE,
        priority=wc.priority,
        pod_sets=(PodSet(name=POD_SET, count=1, requests={CPU: wc.cpu_milli}),),
    )
