"""Gang placement: every pod of a gang gets a node, or none does, and the caller learns why.

Used by the gangpermit service on a snapshot of one cluster's nodes. Straightforward for now:
first-fit-decreasing over nodes, no topology, no preemption. Pure: no I/O, deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import NewType

import msgspec

from muster.api.model import LabelSelector, Resources, Taint, Toleration
from muster.core.matching import selector_matches, untolerated_taint

PodKey = NewType("PodKey", str)  # "<namespace>/<name>"
NodeName = NewType("NodeName", str)

PODS = "pods"  # the node's allocatable pod count; each pod takes 1 (1000 milli-units)
ONE_POD = 1000


class PodRequest(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One pod of a gang: what it asks for and where it may run."""

    key: PodKey
    pod_set: str = ""
    requests: Resources = msgspec.field(default_factory=dict)  # MilliUnits, per pod
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)
    # Required node affinity, flattened: a node qualifies if any term matches its labels.
    node_affinity_terms: tuple[LabelSelector, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


class NodeCapacity(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One node as gang placement sees it.

    `used` is what bound, non-terminal pods already take (their requests, plus `pods`);
    a resource missing from `allocatable` has none, except `pods`: a node that does not
    list `pods` is not limited in how many it runs.
    """

    name: NodeName
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = msgspec.field(default_factory=dict)
    used: Resources = msgspec.field(default_factory=dict)
    unschedulable: bool = False
    ready: bool = True


class Binding(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    pod: PodKey
    node: NodeName


class Placement(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="placement"):
    """Every pod of the gang with its node (sorted by pod), and what each node gives up.

    `usage` is what the caller reserves until the pods are bound: per node, the summed
    requests of the pods placed there, `pods` included.
    """

    bindings: tuple[Binding, ...]
    usage: Mapping[NodeName, Resources]


class NoFit(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="no_fit"):
    """The gang does not fit now. `reason` is what the user sees; `placed` pods would fit."""

    reason: str
    placed: int
    total: int


GangResult = Placement | NoFit


def place_gang(
    pods: Sequence[PodRequest],
    nodes: Sequence[NodeCapacity],
    *,
    reserved: Mapping[NodeName, Resources] | None = None,
) -> GangResult:
    """Place all of `pods` on `nodes`, or none: a Placement, or NoFit with the first failure.

    First-fit-decreasing: pods from largest to smallest (scarce extended resources first, then
    cpu, then memory), each on the first node by name that still has room. Free room is
    allocatable minus `used` minus `reserved` (capacity promised to gangs not yet bound).
    Unschedulable and not-Ready nodes, nodes whose labels miss the pod's node selector or
    affinity, and nodes with a taint the pod does not tolerate are never chosen. Does not
    mutate its inputs; the same inputs in any order give the same result.
    """
    reserved = reserved or {}
    ordered_nodes = sorted(nodes, key=lambda n: n.name)
    # 1. free room per node, on a scratch copy the call owns
    free: dict[NodeName, Counter[str]] = {
        n.name: _free_room(n, reserved.get(n.name, {})) for n in ordered_nodes
    }
    # 2. largest pods first
    placed: list[Binding] = []
    usage: dict[NodeName, Counter[str]] = {}
    order = _resource_order(pods)
    for pod in sorted(pods, key=lambda p: _size_key(p, order)):
        node = _first_fit(pod, ordered_nodes, free)
        if node is None:
            why = _why_unschedulable(pod, ordered_nodes, free)
            return NoFit(
                reason=f"only {len(placed)} of {len(pods)} pods fit; pod {pod.key}"
                + (f" (podset {pod.pod_set})" if pod.pod_set else "")
                + f": {why}",
                placed=len(placed),
                total=len(pods),
            )
        # 3. take the room for the rest of the gang
        demand = _demand(pod)
        free[node.name].subtract(demand)
        usage.setdefault(node.name, Counter()).update(demand)
        placed.append(Binding(pod=pod.key, node=node.name))
    return Placement(
        bindings=tuple(sorted(placed, key=lambda b: b.pod)),
        usage={name: dict(sorted(u.items())) for name, u in sorted(usage.items())},
    )


def _free_room(node: NodeCapacity, reserved: Resources) -> Counter[str]:
    room: Counter[str] = Counter(node.allocatable)
    room.subtract(node.used)
    room.subtract(reserved)
    return room


def _demand(pod: PodRequest) -> dict[str, int]:
    return {**pod.requests, PODS: pod.requests.get(PODS, 0) + ONE_POD}


def _resource_order(pods: Sequence[PodRequest]) -> tuple[str, ...]:
    """Scarcest first: extended resources (gpus) by name, then cpu, then memory."""
    extended = sorted({r for p in pods for r in p.requests} - {"cpu", "memory", PODS})
    return (*extended, "cpu", "memory")


def _size_key(pod: PodRequest, order: tuple[str, ...]) -> tuple[tuple[int, ...], str]:
    """Largest first, compared resource by resource in `order`; the pod key breaks ties."""
    return tuple(-pod.requests.get(r, 0) for r in order), pod.key


def _first_fit(
    pod: PodRequest, nodes: Sequence[NodeCapacity], free: Mapping[NodeName, Counter[str]]
) -> NodeCapacity | None:
    for node in nodes:
        if _rejection(pod, node) is None and not _insufficient(pod, node, free[node.name]):
            return node
    return None


def _rejection(pod: PodRequest, node: NodeCapacity) -> str | None:
    """Why `pod` may never run on `node` whatever its load, in the scheduler's words, or None."""
    if not node.ready:
        return "node(s) were not ready"
    if node.unschedulable:
        return "node(s) were unschedulable"
    if not _labels_match(pod, node.labels):
        return "node(s) didn't match Pod's node affinity/selector"
    taint = untolerated_taint(node.taints, pod.tolerations)
    if taint is not None:
        shown = f"{taint.key}: {taint.value}" if taint.value else taint.key
        return f"node(s) had untolerated taint {{{shown}}}"
    return None


def _labels_match(pod: PodRequest, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    if not pod.node_affinity_terms:
        return True
    return any(selector_matches(term, labels) for term in pod.node_affinity_terms)


def _insufficient(pod: PodRequest, node: NodeCapacity, free: Counter[str]) -> list[str]:
    """The resources `pod` needs more of than `node` has free, by name."""
    short = []
    for name, amount in sorted(_demand(pod).items()):
        if amount <= 0:
            continue
        if name == PODS and PODS not in node.allocatable:
            continue
        if free[name] < amount:
            short.append(name)
    return short


def _why_unschedulable(
    pod: PodRequest, nodes: Sequence[NodeCapacity], free: Mapping[NodeName, Counter[str]]
) -> str:
    """Return the scheduler-style summary: "0/3 nodes are available: 2 Insufficient cpu, ..."."""
    if not nodes:
        return "no nodes in the cluster"
    reasons: Counter[str] = Counter()
    for node in nodes:
        rejection = _rejection(pod, node)
        if rejection is not None:
            reasons[rejection] += 1
            continue
        for name in _insufficient(pod, node, free[node.name]):
            reasons["Too many pods" if name == PODS else f"Insufficient {name}"] += 1
    shown = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
    return f"0/{len(nodes)} nodes are available: {shown}"
