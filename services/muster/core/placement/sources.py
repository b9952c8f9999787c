"""Gang sources to the placement core's inputs: `NodeInfo`, `PodInfo` and `GangSpec`.

Four sources make gangs (issues 4 and 14):
- the Workload API: a pod's `spec.workloadRef` names a scheduling.k8s.io/v1alpha1 Workload and
  one of its pod groups; each `podGroupReplicaKey` is a gang of its own with the group's policy;
- scheduler-plugins' PodGroup: a pod's label `scheduling.x-k8s.io/pod-group`;
- a Kueue-admitted Workload or Job: its pods (label `muster.dev/workload`) form one gang,
  described by `gang_of_admitted`;
- today's gang API (Kubernetes v1.36+): a pod's `spec.schedulingGroup` names a scheduling.k8s.io
  PodGroup, maybe under CompositePodGroups (`group_member`).
Pure functions of decoded api objects, called by the gangpermit service and the simulator alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

import msgspec

from muster.api.convert import KUEUE_V1BETA2, stable_uid
from muster.api.model import (
    Admission,
    CompositePodGroup,
    GroupPolicy,
    Node,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodGroup,
    PodSet,
    PriorityClass,
    ResourceFlavor,
    SchedulingPodGroup,
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
    NO_DEADLINE,
    PODS,
    CompositeSpec,
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
    "NO_GROUPS",
    "SCHEDULER_NAME",
    "AdmittedGang",
    "GroupIndex",
    "Membership",
    "created_at_s",
    "gang_of_admitted",
    "group_member",
    "handled_by",
    "membership",
    "node_info",
    "pod_info",
    "pod_topology",
    "priority_of",
    "resolve_priority",
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


# --- membership: which gang a pod belongs to -------------------------------------------------


class Membership(msgspec.Struct, frozen=True, kw_only=True):
    """The gang a pod belongs to, and what a preemption evicts with it.

    `gang` None: the pod is placed on its own (no gang source, or a basic-policy pod group).
    `spec` None with a `gang`: the gang's Workload, PodGroup or admission is not known (yet), so
    its pods wait. `problem` says why a known source still cannot take the pod. `priority`,
    when set, is the group's, which wins over the pod's own (a scheduling.k8s.io PodGroup);
    `tree_owner`: `workload` is a CompositePodGroup (sub)tree evicted whole.
    """

    gang: GangKey | None = None
    spec: GangSpec | None = None
    workload: str = ""  # PodInfo.workload: "" evicts the pod alone
    problem: str = ""
    priority: int | None = None
    tree_owner: bool = False


class GroupIndex(msgspec.Struct, frozen=True, kw_only=True):
    """The scheduling.k8s.io PodGroups and CompositePodGroups of a cluster, keyed
    "<namespace>/<name>", and the PriorityClasses their priorities resolve against."""

    pod_groups: Mapping[str, SchedulingPodGroup] = msgspec.field(default_factory=dict)
    composites: Mapping[str, CompositePodGroup] = msgspec.field(default_factory=dict)
    priority_classes: Mapping[str, PriorityClass] = msgspec.field(default_factory=dict)


NO_GROUPS = GroupIndex()


def membership(
    pod: Pod,
    *,
    workloads: Mapping[str, SchedulingWorkload],
    pod_groups: Mapping[str, PodGroup],
    admitted: Mapping[str, GangSpec] = _NO_GANGS,
    priority: int = 0,
    default_timeout_s: float | None = None,
    groups: GroupIndex = NO_GROUPS,
) -> Membership:
    """Return the gang `pod` joins. Maps are keyed "<namespace>/<name>".

    Sources, first match wins: spec.workloadRef (`workloads`), label
    `scheduling.x-k8s.io/pod-group` (`pod_groups`), label `muster.dev/workload` (`admitted`, the
    specs from `gang_of_admitted` by workload key), spec.schedulingGroup (`groups`, see
    `group_member`). `priority` becomes the gang's priority (a scheduling.k8s.io PodGroup's own
    wins); `default_timeout_s` its timeout when its source names none (None: the scheduler's
    default). Kueue's podset topology annotations on the pod give a gang without a topology of
    its own one.
    """
    namespace = pod.meta.namespace
    if pod.workload_ref is not None:
        ref = pod.workload_ref
        found = workloads.get(f"{namespace}/{ref.name}")
        return _with_pod_topology(
            pod,
            _workload_api_member(
                namespace, ref, found, priority=priority, timeout_s=default_timeout_s
            ),
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
        return _with_pod_topology(pod, Membership(gang=key, spec=spec, workload=key))
    workload_name = pod.meta.labels.get(WORKLOAD_LABEL)
    if workload_name:
        key = GangKey(f"{namespace}/{workload_name}")
        return Membership(gang=key, spec=admitted.get(key), workload=key)
    if pod.scheduling_group:
        return _with_pod_topology(pod, group_member(pod, groups))
    return Membership()


def _with_pod_topology(pod: Pod, found: Membership) -> Membership:
    """Kueue's podset topology annotations on a pod of a gang that has no topology of its own
    (issue 13: honoured for every gang, not only Kueue-admitted podsets)."""
    spec = found.spec
    if spec is None or spec.topology is not None:
        return found
    topology = pod_topology(pod)
    if topology is None:
        return found
    return msgspec.structs.replace(found, spec=msgspec.structs.replace(spec, topology=topology))


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


# --- today's gang API: scheduling.k8s.io PodGroups and CompositePodGroups --------------------

MAX_COMPOSITE_DEPTH = 3  # CompositePodGroups above a PodGroup: four levels in all


def group_member(pod: Pod, groups: GroupIndex) -> Membership:
    """The gang of a pod naming a scheduling.k8s.io PodGroup in spec.schedulingGroup.

    - the gang is the PodGroup, "<namespace>/<name>": `minCount` for a gang, 1 for the basic
      policy (its pods are placed as they come, as many as fit); its topology key required;
    - the CompositePodGroups above it (`parentCompositePodGroupName`, up to three) are its
      `parents`; until every one exists, or when they form a cycle or span Workloads, it waits
      and says why;
    - its priority is the PodGroup's (`priority`, else its PriorityClass, else the global
      default), whatever its pods say;
    - a preemption evicts the outermost group or tree whose disruption mode is `all`, else the
      pod alone;
    - no deadline (Kubernetes v1.36+), unless annotation `muster.dev/gang-timeout-seconds` on
      the PodGroup (or its root CompositePodGroup) turns muster's on;
    - preemptionPolicy Never anywhere in the tree: it never preempts.
    """
    namespace = pod.meta.namespace
    key = GangKey(f"{namespace}/{pod.scheduling_group}")
    group = groups.pod_groups.get(key)
    if group is None:
        return Membership(gang=key, workload=pod.key, problem=f"waiting for PodGroup {key}")
    chain, problem = _composites_above(group, groups)
    priority = resolve_priority(
        group.policy.priority, group.policy.priority_class_name, groups.priority_classes
    )
    if problem:
        return Membership(gang=key, workload=pod.key, problem=problem, priority=priority)
    owner, tree_owner = _disruption_unit(pod.key, group, chain)
    timeout = next(
        (g.timeout_s for g in (group, *reversed(chain)) if g.timeout_s is not None), NO_DEADLINE
    )
    spec = GangSpec(
        key=key,
        min_count=group.policy.min_count or 1,
        priority=priority,
        created_s=created_at_s(group.meta),
        timeout_s=timeout,
        topology=_required(group.policy.topology_key),
        workload="" if owner == pod.key else owner,  # the same for every pod of the gang
        parents=tuple(
            CompositeSpec(
                key=GangKey(c.key),
                min_groups=c.policy.min_count or 1,
                topology=_required(c.policy.topology_key),
                created_s=created_at_s(c.meta),
                timeout_s=c.timeout_s,
            )
            for c in chain
        ),
        preempts=all(g.policy.preemption_policy != "Never" for g in (group, *chain)),
    )
    return Membership(gang=key, spec=spec, workload=owner, priority=priority, tree_owner=tree_owner)


def _composites_above(
    group: SchedulingPodGroup, groups: GroupIndex
) -> tuple[list[CompositePodGroup], str]:
    """The CompositePodGroups above `group`, innermost first, or why they cannot be used."""
    chain: list[CompositePodGroup] = []
    namespace, parent = group.meta.namespace, group.parent
    workloads = {group.workload_name}
    while parent:
        key = f"{namespace}/{parent}"
        found = groups.composites.get(key)
        if found is None:
            return [], f"waiting for CompositePodGroup {key}"
        if any(c.key == key for c in chain):
            return [], f"CompositePodGroup {key} is its own ancestor"
        chain.append(found)
        if len(chain) > MAX_COMPOSITE_DEPTH:
            return [], f"more than {MAX_COMPOSITE_DEPTH + 1} levels of groups above {group.key}"
        workloads.add(found.workload_name)
        parent = found.parent
    if len(workloads) > 1:
        names = ", ".join(sorted(workloads))
        return [], f"the groups above {group.key} belong to several Workloads ({names})"
    return chain, ""


def _disruption_unit(
    pod: str, group: SchedulingPodGroup, chain: list[CompositePodGroup]
) -> tuple[str, bool]:
    """What a preemption evicts with the pod: the outermost group with disruption mode `all`
    (a CompositePodGroup's whole subtree), else the pod alone."""
    for composite in reversed(chain):
        if composite.policy.disruption == "all":
            return composite.key, True
    return (group.key, False) if group.policy.disruption == "all" else (pod, False)


def _required(label: str) -> TopologyRequest | None:
    return TopologyRequest(key=label, required=True) if label else None


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
    groups: GroupIndex = NO_GROUPS,
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
    - a gang policy of its own replaces the last two (queues and gangs together, issue 14): a
      Job's `spec.scheduling` (`wl.scheduling`), else the scheduling.k8s.io PodGroup its pod
      template names in `spec.schedulingGroup` (found in `groups`): a gang's `minCount`
      (capped at the admitted count) or 1 for the basic policy, its topology key required;
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
    policy = wl.scheduling or _template_group_policy(wl, pod_sets, groups)
    if policy is not None:
        admitted_count = sum(ps.count for ps in pod_sets)
        spec = msgspec.structs.replace(
            spec,
            min_count=min(policy.min_count or 1, admitted_count),
            topology=_required(policy.topology_key) or spec.topology,
        )
    pods = tuple(
        _admitted_pod(wl, ps, index, priority=priority)
        for ps in pod_sets
        for index in range(ps.count)
    )
    return AdmittedGang(spec=spec, pod_sets=tuple(pod_sets), pods=pods)


def _template_group_policy(
    wl: Workload, pod_sets: Iterable[PodSet], groups: GroupIndex
) -> GroupPolicy | None:
    """The policy of the PodGroup the first podset naming one names, if it exists."""
    for ps in pod_sets:
        if ps.scheduling_group:
            group = groups.pod_groups.get(f"{wl.meta.namespace}/{ps.scheduling_group}")
            return None if group is None else group.policy
    return None


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
