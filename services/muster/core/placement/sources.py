"""Gang sources to the placement core's inputs: `NodeInfo`, `PodInfo` and `GangSpec`.

Three sources make gangs (issue 4):
- the Workload API: a pod's `spec.workloadRef` names a scheduling.k8s.io/v1alpha1 Workload and
  one of its pod groups; each `podGroupReplicaKey` is a gang of its own with the group's policy;
- scheduler-plugins' PodGroup: a pod's label `scheduling.x-k8s.io/pod-group`;
- a Kueue-admitted Workload or Job: its pods (label `muster.dev/workload`) form one gang,
  described by `gang_of_admitted`.
Pure functions of decoded api objects, called by the gangpermit service and the simulator alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

import msgspec

from muster.api.convert import KUEUE_V1BETA2, stable_uid
from muster.api.model import (
    Admission,
    Node,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodGroup,
    PodSet,
    PriorityClass,
    ResourceFlavor,
    SchedulingWorkload,
    Workload,
    WorkloadRef,
)
from muster.api.podspec import admitted_pod_set, flavor_placement
from muster.api.times import parse_time
from muster.api.wellknown import (
    POD_GROUP_LABEL,
    POD_SET_ANNOTATION,
    PREFERRED_TOPOLOGY_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
    SCHEDULER_NAME,
    WORKLOAD_LABEL,
)
from muster.core.placement.model import (
    DEFAULT_MAX_PODS,
    PODS,
    GangKey,
    GangSpec,
    NodeInfo,
    NodeName,
    PodInfo,
    PodKey,
    TopologyRequest,
)

_NO_GANGS: Mapping[str, GangSpec] = MappingProxyType({})

__all__ = [
    "SCHEDULER_NAME",
    "AdmittedGang",
    "Membership",
    "created_at_s",
    "gang_of_admitted",
    "handled_by",
    "membership",
    "node_info",
    "pod_info",
    "priority_of",
    "topology_of",
]


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
    )


def priority_of(pod: Pod, priority_classes: Mapping[str, PriorityClass]) -> int:
    """Return the pod's priority, as Kubernetes' priority admission resolves it.

    spec.priority when written; else the value of the PriorityClass it names (0 for an unknown
    name, a pod Kubernetes would have refused); else the global default class's value (the
    first by name if several claim it); else 0. `priority_classes` are keyed by name.
    """
    if pod.priority is not None:
        return pod.priority
    if pod.priority_class_name:
        known = priority_classes.get(pod.priority_class_name)
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


# --- membership: which gang a pod belongs to -------------------------------------------------


class Membership(msgspec.Struct, frozen=True, kw_only=True):
    """The gang a pod belongs to, and what a preemption evicts with it.

    `gang` None: the pod is placed on its own (no gang source, or a basic-policy pod group).
    `spec` None with a `gang`: the gang's Workload, PodGroup or admission is not known (yet), so
    its pods wait. `problem` says why a known source still cannot take the pod.
    """

    gang: GangKey | None = None
    spec: GangSpec | None = None
    workload: str = ""  # PodInfo.workload: "" evicts the pod alone
    problem: str = ""


def membership(
    pod: Pod,
    *,
    workloads: Mapping[str, SchedulingWorkload],
    pod_groups: Mapping[str, PodGroup],
    admitted: Mapping[str, GangSpec] = _NO_GANGS,
    priority: int = 0,
    default_timeout_s: float | None = None,
) -> Membership:
    """Return the gang `pod` joins. Maps are keyed "<namespace>/<name>".

    Sources, first match wins: spec.workloadRef (`workloads`), label
    `scheduling.x-k8s.io/pod-group` (`pod_groups`), label `muster.dev/workload` (`admitted`, the
    specs from `gang_of_admitted` by workload key). `priority` becomes the gang's priority;
    `default_timeout_s` its timeout when its source names none (None: the scheduler's default).
    """
    namespace = pod.meta.namespace
    if pod.workload_ref is not None:
        ref = pod.workload_ref
        found = workloads.get(f"{namespace}/{ref.name}")
        return _workload_api_member(
            namespace, ref, found, priority=priority, timeout_s=default_timeout_s
        )
    group_name = pod.meta.labels.get(POD_GROUP_LABEL)
    if group_name:
        key = GangKey(f"{namespace}/{group_name}")
        group = pod_groups.get(key)
        if group is None:
            return Membership(gang=key, workload=key)
        timeout = group.schedule_timeout_seconds
        spec = GangSpec(
            key=key,
            min_count=group.min_member,
            priority=priority,
            created_s=created_at_s(group.meta),
            timeout_s=default_timeout_s if timeout is None else timeout,
            workload=key,
        )
        return Membership(gang=key, spec=spec, workload=key)
    workload_name = pod.meta.labels.get(WORKLOAD_LABEL)
    if workload_name:
        key = GangKey(f"{namespace}/{workload_name}")
        return Membership(gang=key, spec=admitted.get(key), workload=key)
    return Membership()


def _workload_api_member(
    namespace: str,
    ref: WorkloadRef,
    wl: SchedulingWorkload | None,
    *,
    priority: int,
    timeout_s: float | None,
) -> Membership:
    """Gang "<ns>/<workload>/<podGroup>", plus "/<replicaKey>" when the pod names one; a
    preemption evicts the whole Workload."""
    owner = f"{namespace}/{ref.name}"
    replica = f"/{ref.pod_group_replica_key}" if ref.pod_group_replica_key else ""
    key = GangKey(f"{owner}/{ref.pod_group}{replica}")
    if wl is None:
        return Membership(gang=key, workload=owner)
    group = next((g for g in wl.pod_groups if g.name == ref.pod_group), None)
    if group is None:
        names = ", ".join(g.name for g in wl.pod_groups) or "none"
        problem = f"Workload {owner} has no pod group {ref.pod_group!r} (it has {names})"
        return Membership(gang=key, workload=owner, problem=problem)
    if group.policy.min_count is None:  # basic policy: pods are placed one at a time
        return Membership(workload=owner)
    spec = GangSpec(
        key=key,
        min_count=group.policy.min_count,
        priority=priority,
        created_s=created_at_s(wl.meta),
        timeout_s=timeout_s,
        workload=owner,
    )
    return Membership(gang=key, spec=spec, workload=owner)


# --- Kueue-admitted workloads -----------------------------------------------------------------


class AdmittedGang(msgspec.Struct, frozen=True, kw_only=True):
    """A Kueue-admitted workload as one gang: its spec, its podsets as admitted, and its pods.

    `pods` are what the binder starts for the workload (named `<workload>-<podset>-<index>`,
    labelled `muster.dev/workload`, annotated `muster.dev/pod-set`, scheduler `muster`), so the
    simulator can place exactly the pods a real cluster would hold.
    """

    spec: GangSpec
    pod_sets: tuple[PodSet, ...]
    pods: tuple[Pod, ...]


def gang_of_admitted(
    wl: Workload,
    admission: Admission,
    *,
    flavors: Mapping[str, ResourceFlavor],
    priority: int,
    created_s: float,
    timeout_s: float | None = None,
) -> AdmittedGang:
    """Return the gang of Kueue workload `wl` under `admission`, for both gangpermit and the sim.

    - key and evicted workload: the workload key "<namespace>/<name>";
    - pods: per assigned podset, the admitted count, with the node labels and tolerations of the
      assigned `flavors` (ResourceFlavors by name) merged in (`muster.api.podspec.
      admitted_pod_set`, shared with the binder); assignments naming a podset the workload lacks
      are skipped (the binder reports them);
    - min_count: over the podsets, `minCount` when set (capped at the admitted count), else the
      admitted count: a podset with minCount is a gang of that size;
    - topology: `kueue.x-k8s.io/podset-required-topology` of the first podset that sets it,
      else the first `podset-preferred-topology` (required wins);
    - `priority` and `created_s` (the workload's, as the admission core resolved them) order it
      among gangs; `timeout_s` None leaves the scheduler's default.

    The gangpermit service needs only `spec` (its pods arrive from the cluster, and `membership`
    finds them by label); the simulator also creates `pods`.
    """
    by_name = {ps.name: ps for ps in wl.pod_sets}
    pod_sets: list[PodSet] = []
    for assignment in admission.pod_set_assignments:
        ps = by_name.get(assignment.name)
        if ps is None:
            continue
        node_labels, tolerations = flavor_placement(assignment.flavors.values(), flavors)
        pod_sets.append(
            admitted_pod_set(
                wl, ps, count=assignment.count, node_labels=node_labels, tolerations=tolerations
            )
        )
    key = GangKey(str(wl.key))
    spec = GangSpec(
        key=key,
        min_count=sum(
            ps.count if ps.min_count is None else min(ps.min_count, ps.count) for ps in pod_sets
        ),
        priority=priority,
        created_s=created_s,
        timeout_s=timeout_s,
        topology=topology_of(pod_sets),
        workload=key,
    )
    pods = tuple(
        _admitted_pod(wl, ps, index, priority=priority)
        for ps in pod_sets
        for index in range(ps.count)
    )
    return AdmittedGang(spec=spec, pod_sets=tuple(pod_sets), pods=pods)


def topology_of(pod_sets: Iterable[PodSet]) -> TopologyRequest | None:
    """The gang's topology from its podsets' Kueue annotations; a required one wins."""
    pod_sets = tuple(pod_sets)
    for annotation, required in (
        (REQUIRED_TOPOLOGY_ANNOTATION, True),
        (PREFERRED_TOPOLOGY_ANNOTATION, False),
    ):
        for ps in pod_sets:
            label = ps.annotations.get(annotation)
            if label:
                return TopologyRequest(key=label, required=required)
    return None


def _admitted_pod(wl: Workload, ps: PodSet, index: int, *, priority: int) -> Pod:
    """Pod `index` of admitted podset `ps`, shaped as the binder's cluster backend starts it."""
    namespace, name = wl.meta.namespace, f"{wl.meta.name}-{ps.name}-{index}"
    return Pod(
        meta=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=stable_uid("Pod", namespace, name),
            labels={WORKLOAD_LABEL: wl.meta.name},
            annotations={**ps.annotations, POD_SET_ANNOTATION: ps.name},
            owner_references=(
                OwnerReference(
                    api_version=KUEUE_V1BETA2,
                    kind="Workload",
                    name=wl.meta.name,
                    uid=wl.meta.uid,
                    controller=True,
                ),
            ),
        ),
        scheduler_name=SCHEDULER_NAME,
        requests=ps.requests,
        node_selector=ps.node_selector,
        node_affinity_terms=ps.node_affinity_terms,
        tolerations=ps.tolerations,
        priority=priority,
    )
