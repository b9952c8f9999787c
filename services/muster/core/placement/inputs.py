"""Kubernetes objects as the placement core's inputs: `NodeInfo`, `PodInfo`, priorities, times.

Pure functions of decoded api objects, shared by every gang source (`membership`, `admitted`),
the gangpermit service and the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping

from muster.api.model import Node, ObjectMeta, Pod, PriorityClass
from muster.api.times import parse_time
from muster.api.wellknown import (
    PREFERRED_TOPOLOGY_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
    SCHEDULER_NAME,
)
from muster.core.placement.model import (
    DEFAULT_MAX_PODS,
    PODS,
    GangKey,
    NodeInfo,
    NodeName,
    PodInfo,
    PodKey,
    TopologyRequest,
)


def handled_by(pod: Pod, scheduler_name: str = SCHEDULER_NAME) -> bool:
    """Whether muster places `pod`: it names `scheduler_name` in spec.schedulerName.

    Other pods are left to their scheduler, but once bound they still take room on their node:
    callers report them with `pod_info` and never ask to place them.
    """
    return pod.scheduler_name == scheduler_name


def node_info(node: Node) -> NodeInfo:
    """The node as placement sees it; `pods` is the kubelet's default of 110 when not listed."""
    allocatable = dict(node.allocatable)
    allocatable.setdefault(PODS, DEFAULT_MAX_PODS)
    return NodeInfo(
        name=NodeName(node.meta.name),
        labels=node.meta.labels,
        taints=node.taints,
        allocatable=allocatable,
        unschedulable=node.unschedulable,
        ready=node.ready,
    )


def pod_info(
    pod: Pod,
    *,
    gang: GangKey | None,
    workload: str = "",
    priority: int = 0,
    created_s: float | None = None,
    tree_owner: bool = False,
) -> PodInfo:
    """The pod as placement sees it, bound when spec.nodeName is set.

    `gang` and `workload` come from `membership`; `created_s` defaults to the pod's own
    creationTimestamp. A `pods` request, if any, is dropped: every pod takes one pod slot.
    """
    return PodInfo(
        key=PodKey(pod.key),
        gang=gang,
        workload=workload,
        priority=priority,
        created_s=created_at_s(pod.meta) if created_s is None else created_s,
        requests={name: value for name, value in pod.requests.items() if name != PODS},
        node_selector=pod.node_selector,
        node_affinity_terms=pod.node_affinity_terms,
        tolerations=pod.tolerations,
        node=NodeName(pod.node_name) if pod.node_name else "",
        tree_owner=tree_owner,
    )


def priority_of(pod: Pod, priority_classes: Mapping[str, PriorityClass]) -> int:
    """Return the pod's priority, as Kubernetes' priority admission resolves it.

    spec.priority when written; else the value of the PriorityClass it names (0 for an unknown
    name, a pod Kubernetes would have refused); else the global default class's value (the
    first by name if several claim it); else 0. `priority_classes` are keyed by name.
    """
    return resolve_priority(pod.priority, pod.priority_class_name, priority_classes)


def resolve_priority(
    priority: int | None, class_name: str | None, priority_classes: Mapping[str, PriorityClass]
) -> int:
    """A pod's or a PodGroup's priority from what it wrote, as `priority_of` says."""
    if priority is not None:
        return priority
    if class_name:
        known = priority_classes.get(class_name)
        return known.value if known is not None else 0
    defaults = sorted(
        (name, pc.value) for name, pc in priority_classes.items() if pc.global_default
    )
    return defaults[0][1] if defaults else 0


def created_at_s(meta: ObjectMeta) -> float:
    """metadata.creationTimestamp in seconds since the epoch; 0.0 when not written."""
    text = meta.creation_timestamp
    if not text:
        return 0.0
    try:
        return parse_time(text)
    except ValueError:  # decoding reports bad timestamps; an object built in code may have one
        return 0.0


def pod_topology(pod: Pod) -> TopologyRequest | None:
    annotations = pod.meta.annotations
    for annotation, required in (
        (REQUIRED_TOPOLOGY_ANNOTATION, True),
        (PREFERRED_TOPOLOGY_ANNOTATION, False),
    ):
        label = annotations.get(annotation)
        if label:
            return TopologyRequest(key=label, required=required)
    return None


def required_topology(label: str) -> TopologyRequest | None:
    """A topology key as a required topology; None for no key."""
    return TopologyRequest(key=label, required=True) if label else None
