"""Cluster views to gang placement's inputs: nodes with what bound pods use, pods as requests.

Pure; used by the gangpermit service on each pass over waiting gangs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from muster.api.quantity import parse_quantity
from muster.cluster.objects import DEFAULT_MAX_PODS, NodeView, PodView
from muster.core.gang import ONE_POD, PODS, NodeCapacity, NodeName, PodKey, PodRequest

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def pod_key(namespace: str, name: str) -> PodKey:
    return PodKey(f"{namespace}/{name}")


def node_capacities(nodes: Iterable[NodeView], pods: Iterable[PodView]) -> tuple[NodeCapacity, ...]:
    """Every node with `used` = requests (and count) of its bound, non-terminal pods.

    A node that does not list `pods` among its allocatable resources gets the kubelet's
    default of 110.
    """
    used: dict[str, Counter[str]] = {}
    for pod in pods:
        if pod.node_name and pod.phase not in TERMINAL_PHASES:
            total = used.setdefault(pod.node_name, Counter())
            total.update(pod.requests)
            total[PODS] += ONE_POD
    return capacities_from_usage(nodes, used)


def capacities_from_usage(
    nodes: Iterable[NodeView], used: Mapping[str, Mapping[str, int]]
) -> tuple[NodeCapacity, ...]:
    """Every node with `used[node name]` (what its bound, non-terminal pods request)."""
    default_pods = int(parse_quantity(DEFAULT_MAX_PODS))
    out = []
    for node in nodes:
        allocatable = dict(node.allocatable)
        allocatable.setdefault(PODS, default_pods)
        out.append(
            NodeCapacity(
                name=NodeName(node.name),
                labels=node.labels,
                taints=node.taints,
                allocatable=allocatable,
                used=dict(used.get(node.name, {})),
                unschedulable=node.unschedulable,
                ready=node.ready,
            )
        )
    return tuple(out)


def pod_request(pod: PodView) -> PodRequest:
    return PodRequest(
        key=pod_key(pod.namespace, pod.name),
        pod_set=pod.pod_set,
        requests=pod.requests,
        node_selector=pod.node_selector,
        tolerations=pod.tolerations,
    )


def reserved_usage(
    bindings: Iterable[tuple[PodKey, NodeName]], pods: Mapping[PodKey, PodView]
) -> dict[NodeName, dict[str, int]]:
    """What permitted-but-not-yet-bound pods hold, per node.

    A pod already bound (or gone) holds nothing here: once bound, `node_capacities` counts it.
    """
    reserved: dict[NodeName, Counter[str]] = {}
    for key, node in bindings:
        pod = pods.get(key)
        if pod is None or pod.node_name:
            continue
        total = reserved.setdefault(node, Counter())
        total.update(pod.requests)
        total[PODS] += ONE_POD
    return {node: dict(total) for node, total in sorted(reserved.items())}


def index_pods(pods: Sequence[PodView]) -> dict[PodKey, PodView]:
    return {pod_key(p.namespace, p.name): p for p in pods}
