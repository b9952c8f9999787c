"""The placement section's gang API rows: gangs written as today's Kubernetes objects
(scheduling.k8s.io/v1beta1 PodGroups, a v1alpha3 CompositePodGroup tree) and the same gangs as
the v1.35 Workload API (v1alpha1 Workloads and `workloadRef`), in the same run.

Each row reports api objects as gang-permit does (`sources.membership` per pod, then the
scheduler), runs the passes and binds what is permitted; the wall time covers all of it, not
building the objects. Cases, at 5 000 nodes of 4 cpu / 32Gi / 110 pods in 50 racks of 100
nodes and 10 blocks of 5 racks:
- 1 000 gangs of 8 pods (batched and streamed): ms per gang;
- one gang of 1 000 pods (250m) required in one rack (v1alpha1: Kueue's
  podset-required-topology annotation on its pods): ms for the decision;
- a CompositePodGroup of 16 gangs of 8 in one block, each gang in one rack of it (v1alpha1: 16
  gangs of 8, each in one rack, with no tree above them): ms for the decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Literal

import msgspec

from muster.api.model import (
    CompositePodGroup,
    GroupPolicy,
    ObjectMeta,
    Pod,
    PodGroupPolicy,
    SchedulingPodGroup,
    SchedulingWorkload,
    WorkloadPodGroup,
    WorkloadRef,
)
from muster.api.wellknown import REQUIRED_TOPOLOGY_ANNOTATION, SCHEDULER_NAME
from muster.bench.placement import BIG_CASE, GANGS_CASE, MODES, TREE_CASE, Mode, PlacementRow
from muster.core.placement.model import (
    ONE_POD,
    PODS,
    CompositeSpec,
    GangKey,
    GangPermitted,
    GangSpec,
    NodeInfo,
    NodeName,
    PodInfo,
    PodKey,
    Scoring,
    TopologyRequest,
)
from muster.core.placement.scheduler import GangScheduler
from muster.core.placement.sources import GroupIndex, membership, pod_info

Api = Literal["v1beta1", "v1alpha1"]
APIS: tuple[Api, ...] = ("v1beta1", "v1alpha1")
RACK, BLOCK = "topology.example.com/rack", "topology.example.com/block"
NODES, RACKS, RACKS_PER_BLOCK = 5_000, 50, 5
GANGS, GANG_SIZE = 1_000, 8
BIG_GANG = 1_000
TREE_CHILDREN, TREE_CHILD_SIZE = 16, 8
NS = "bench"


class Objects(msgspec.Struct, kw_only=True):
    """The api objects of one case: gang sources and pods."""

    workloads: dict[str, SchedulingWorkload] = msgspec.field(default_factory=dict)
    groups: dict[str, SchedulingPodGroup] = msgspec.field(default_factory=dict)
    composites: dict[str, CompositePodGroup] = msgspec.field(default_factory=dict)
    units: list[list[Pod]] = msgspec.field(default_factory=list)  # pods, one list per gang


def scaled(count: int, scale: float) -> int:
    return max(1, round(count * scale))


def cluster(
    nodes: int, racks: int, allocatable: dict[str, int], *, scoring: Scoring = "binpack"
) -> GangScheduler:
    """`nodes` identical nodes, in `racks` racks of consecutive nodes and blocks of racks."""
    scheduler = GangScheduler(scoring=scoring)
    per_rack = max(1, nodes // racks)
    for i in range(nodes):
        rack = min(i // per_rack, racks - 1)
        labels = {RACK: f"rack-{rack:02d}", BLOCK: f"block-{rack // RACKS_PER_BLOCK:02d}"}
        scheduler.upsert_node(
            NodeInfo(name=NodeName(f"node-{i:05d}"), labels=labels, allocatable=allocatable)
        )
    warm_up(scheduler)
    return scheduler


def warm_up(scheduler: GangScheduler) -> None:
    """Place and remove a one-pod tree on blocks and racks: the node table's label columns
    are built (once per cluster, as in a long-running gang-permit) before anything is
    measured."""
    block = CompositeSpec(
        key=GangKey("warm/tree"), topology=TopologyRequest(key=BLOCK, required=True)
    )
    spec = GangSpec(
        key=GangKey("warm/g"),
        min_count=1,
        topology=TopologyRequest(key=RACK, required=True),
        parents=(block,),
    )
    scheduler.upsert_gang(spec)
    scheduler.upsert_pod(PodInfo(key=PodKey("warm/p"), gang=spec.key, requests={"cpu": 1}))
    scheduler.schedule(now_s=0.0)
    scheduler.remove_pod(PodKey("warm/p"))
    scheduler.remove_gang(spec.key)
    scheduler.schedule(now_s=0.0)


def _meta(name: str, **kw: object) -> ObjectMeta:
    return ObjectMeta(name=name, namespace=NS, **kw)  # type: ignore[arg-type]


def _pod(name: str, *, cpu: int, api: Api, group: str, topology: bool = False) -> Pod:
    annotations = {REQUIRED_TOPOLOGY_ANNOTATION: RACK} if topology and api == "v1alpha1" else {}
    return Pod(
        meta=_meta(name, annotations=annotations),
        scheduler_name=SCHEDULER_NAME,
        requests={"cpu": cpu, "memory": 500 * 2**20 * 1000},
        scheduling_group=group if api == "v1beta1" else "",
        workload_ref=WorkloadRef(name=group, pod_group="workers") if api == "v1alpha1" else None,
    )


def gangs(api: Api, *, count: int, size: int, cpu: int, topology: bool, prefix: str) -> Objects:
    """`count` gangs of `size` pods, each a PodGroup (v1beta1) or a Workload (v1alpha1)."""
    found = Objects()
    for g in range(count):
        name = f"{prefix}-{g:05d}"
        policy = GroupPolicy(min_count=size, topology_key=RACK if topology else "")
        if api == "v1beta1":
            found.groups[f"{NS}/{name}"] = SchedulingPodGroup(
                meta=_meta(name), api_version="scheduling.k8s.io/v1beta1", policy=policy
            )
        else:
            group = WorkloadPodGroup(name="workers", policy=PodGroupPolicy(min_count=size))
            found.workloads[f"{NS}/{name}"] = SchedulingWorkload(
                meta=_meta(name), pod_groups=(group,)
            )
        found.units.append(
            [
                _pod(f"{name}-{i}", cpu=cpu, api=api, group=name, topology=topology)
                for i in range(size)
            ]
        )
    return found


def tree(api: Api, *, children: int, size: int) -> Objects:
    """A CompositePodGroup on blocks over `children` rack-bound gangs (v1alpha1: the gangs)."""
    found = gangs(api, count=children, size=size, cpu=100, topology=True, prefix="child")
    if api == "v1beta1":
        root = CompositePodGroup(
            meta=_meta("root"),
            api_version="scheduling.k8s.io/v1alpha3",
            workload_name="trainer",
            template_name="root",
            policy=GroupPolicy(min_count=children, topology_key=BLOCK),
        )
        found.composites[root.key] = root
        found.groups = {
            key: msgspec.structs.replace(g, parent="root", workload_name="trainer")
            for key, g in found.groups.items()
        }
        found.units = [[p for unit in found.units for p in unit]]  # one decision
    return found


class Reporter:
    """What gang-permit does with a pod it is told of: its gang (`membership`), the gang's
    spec when new or changed, then the pod; and binding what is permitted."""

    def __init__(self, scheduler: GangScheduler, objects: Objects) -> None:
        self.scheduler = scheduler
        self.objects = objects
        self.index = GroupIndex(pod_groups=objects.groups, composites=objects.composites)
        self.specs: dict[GangKey, GangSpec] = {}
        self.pods: dict[PodKey, Pod] = {}
        self.permitted = 0
        self.passes = 0
        self.deciding_s = 0.0  # in the scheduler's passes only

    def report(self, pod: Pod) -> None:
        self.pods[PodKey(pod.key)] = pod
        found = membership(pod, workloads=self.objects.workloads, pod_groups={}, groups=self.index)
        spec = found.spec
        if spec is not None and self.specs.get(spec.key) != spec:
            self.specs[spec.key] = spec
            self.scheduler.upsert_gang(spec)
        info = pod_info(pod, gang=found.gang, workload=found.workload, priority=found.priority or 0)
        self.scheduler.upsert_pod(info)

    def schedule(self, now_s: float) -> None:
        self.passes += 1
        started = time.perf_counter()
        decisions = self.scheduler.schedule(now_s=now_s)
        self.deciding_s += time.perf_counter() - started
        for decision in decisions:
            if isinstance(decision, GangPermitted):
                for binding in decision.bindings:
                    pod = self.pods[binding.pod]
                    self.report(msgspec.structs.replace(pod, node_name=binding.node))
                    self.permitted += 1


def feed(scheduler: GangScheduler, objects: Objects, *, batched: bool) -> tuple[float, Reporter]:
    """Report each unit's pods, pass (after each unit, or once at the end), bind; the wall."""
    reporter = Reporter(scheduler, objects)
    started = time.perf_counter()
    for n, unit in enumerate(objects.units):
        for pod in unit:
            reporter.report(pod)
        if not batched:
            reporter.schedule(1.0 + n)
    if batched:
        reporter.schedule(1.0)
    return time.perf_counter() - started, reporter


NODE = {"cpu": 4_000, "memory": 32 * 2**30 * 1000, PODS: 110 * ONE_POD}


def run(*, scale: float, scoring: Scoring = "binpack") -> Iterator[PlacementRow]:
    """Every case, both APIs, one row each (v1beta1 first), as each finishes."""
    nodes, racks = scaled(NODES, scale), scaled(RACKS, scale)
    count = scaled(GANGS, scale)
    for mode in MODES:
        for api in APIS:
            objects = gangs(api, count=count, size=GANG_SIZE, cpu=100, topology=False, prefix="g")
            yield _row(
                GANGS_CASE,
                api,
                mode,
                nodes,
                objects,
                per=count,
                scale=scale,
                racks=racks,
                scoring=scoring,
            )
    one_decision: tuple[tuple[str, Callable[[Api], Objects]], ...] = (
        (
            BIG_CASE,
            lambda api: gangs(
                api, count=1, size=scaled(BIG_GANG, scale), cpu=250, topology=True, prefix="big"
            ),
        ),
        (
            TREE_CASE,
            lambda api: tree(api, children=scaled(TREE_CHILDREN, scale), size=TREE_CHILD_SIZE),
        ),
    )
    for case, build in one_decision:
        for api in APIS:
            objects = build(api)
            yield _row(
                case,
                api,
                "batched",
                nodes,
                objects,
                per=1,
                scale=scale,
                racks=racks,
                scoring=scoring,
            )


def _row(
    case: str,
    api: Api,
    mode: Mode,
    nodes: int,
    objects: Objects,
    *,
    per: int,
    scale: float,
    racks: int,
    scoring: Scoring,
) -> PlacementRow:
    scheduler = cluster(nodes, racks, NODE, scoring=scoring)
    wall_s, reporter = feed(scheduler, objects, batched=mode == "batched")
    pods = sum(len(unit) for unit in objects.units)
    return PlacementRow(
        case=case,
        api=api,
        mode=mode,
        scoring=scoring,
        scale=scale,
        nodes=nodes,
        placed_before=0,
        pods=pods,
        gangs=len(reporter.specs),
        permitted=reporter.permitted,
        passes=reporter.passes,
        wall_s=round(wall_s, 4),
        pods_per_s=round(pods / wall_s, 1) if wall_s > 0 else 0.0,
        # The gangs case: everything, per gang; the others: the decision (the pass) alone.
        ms_per_gang=round(1000 * (wall_s if case == GANGS_CASE else reporter.deciding_s) / per, 4),
    )
