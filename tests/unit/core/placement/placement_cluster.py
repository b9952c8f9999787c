"""Keyword factories for gang placement tests: nodes, pods, gangs and a scheduler, in the units
people write ("4", "16Gi"), and helpers that read decisions back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from muster.api.model import LabelSelector, Taint, Toleration
from muster.api.quantity import parse_quantity
from muster.core.placement.model import (
    Decision,
    GangKey,
    GangPermitted,
    GangSpec,
    GangTimedOut,
    GangWaiting,
    NodeInfo,
    NodeName,
    PlacementPreempted,
    PodInfo,
    PodKey,
    Scoring,
    TopologyRequest,
)
from muster.core.placement.scheduler import GangScheduler


def res(**amounts: str) -> dict[str, int]:
    """Milli-units from quantities; `nvidia_com_gpu` spells nvidia.com/gpu."""
    return {name.replace("_com_", ".com/"): int(parse_quantity(v)) for name, v in amounts.items()}


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    unschedulable: bool = False,
    ready: bool = True,
    **extra: str,
) -> NodeInfo:
    return NodeInfo(
        name=NodeName(name),
        labels=labels or {},
        taints=taints,
        allocatable=res(cpu=cpu, memory=memory, pods=pods, **extra),
        unschedulable=unschedulable,
        ready=ready,
    )


def pod(
    name: str,
    *,
    gang: str | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
    priority: int = 0,
    created_s: float = 0.0,
    workload: str = "",
    node: str = "",
    selector: dict[str, str] | None = None,
    affinity: tuple[LabelSelector, ...] = (),
    tolerations: tuple[Toleration, ...] = (),
    **extra: str,
) -> PodInfo:
    return PodInfo(
        key=PodKey(f"ns/{name}"),
        gang=None if gang is None else GangKey(f"ns/{gang}"),
        workload=workload,
        priority=priority,
        created_s=created_s,
        requests=res(cpu=cpu, memory=memory, **extra),
        node_selector=selector or {},
        node_affinity_terms=affinity,
        tolerations=tolerations,
        node=NodeName(node) if node else "",
    )


def members(gang: str, count: int, **kwargs: object) -> list[PodInfo]:
    """`count` pods of gang `gang`, named <gang>-0, <gang>-1, ..."""
    return [pod(f"{gang}-{i}", gang=gang, **kwargs) for i in range(count)]  # type: ignore[arg-type]


def gang(
    name: str,
    min_count: int,
    *,
    priority: int = 0,
    created_s: float = 0.0,
    timeout_s: float | None = None,
    topology: str | None = None,
    required: bool = True,
    workload: str = "",
) -> GangSpec:
    return GangSpec(
        key=GangKey(f"ns/{name}"),
        min_count=min_count,
        priority=priority,
        created_s=created_s,
        timeout_s=timeout_s,
        topology=None if topology is None else TopologyRequest(key=topology, required=required),
        workload=workload,
    )


def scheduler(
    nodes: Iterable[NodeInfo] = (),
    *,
    gangs: Iterable[GangSpec] = (),
    pods: Iterable[PodInfo] = (),
    scoring: Scoring = "binpack",
    preemption: bool = True,
    default_timeout_s: float = 300.0,
) -> GangScheduler:
    s = GangScheduler(scoring=scoring, preemption=preemption, default_timeout_s=default_timeout_s)
    for n in nodes:
        s.upsert_node(n)
    for g in gangs:
        s.upsert_gang(g)
    for p in pods:
        s.upsert_pod(p)
    return s


def bind_all(s: GangScheduler, decisions: Sequence[Decision], pods: Iterable[PodInfo]) -> None:
    """Report every permitted pod of `pods` bound where it was permitted, as the binder does."""
    nodes = {b.pod: b.node for d in decisions if isinstance(d, GangPermitted) for b in d.bindings}
    for p in pods:
        if p.key in nodes:
            s.upsert_pod(bound(p, nodes[p.key]))


def bound(p: PodInfo, node_name: str) -> PodInfo:
    return msgspec.structs.replace(p, node=NodeName(node_name))


def placements(decisions: Iterable[Decision]) -> dict[str, str]:
    """Pod name -> node, over every GangPermitted."""
    return {
        b.pod.removeprefix("ns/"): b.node
        for d in decisions
        if isinstance(d, GangPermitted)
        for b in d.bindings
    }


def kinds(decisions: Iterable[Decision]) -> list[tuple[str, str]]:
    """(decision type, unit name) in order."""
    return [(type(d).__name__, d.gang.removeprefix("ns/")) for d in decisions]


def waiting(decisions: Iterable[Decision]) -> dict[str, str]:
    return {d.gang.removeprefix("ns/"): d.reason for d in decisions if isinstance(d, GangWaiting)}


def timed_out(decisions: Iterable[Decision]) -> list[GangTimedOut]:
    return [d for d in decisions if isinstance(d, GangTimedOut)]


def preempted(decisions: Iterable[Decision]) -> list[PlacementPreempted]:
    return [d for d in decisions if isinstance(d, PlacementPreempted)]
