"""Which gang a pod belongs to, from the gang sources its objects name (issues 4 and 14).

- the Workload API: a pod's `spec.workloadRef` names a scheduling.k8s.io/v1alpha1 Workload and
  one of its pod groups; each `podGroupReplicaKey` is a gang of its own with the group's policy;
- scheduler-plugins' PodGroup: a pod's label `scheduling.x-k8s.io/pod-group`;
- a Kueue-admitted Workload or Job: its pods (label `muster.dev/workload`) form one gang, whose
  spec `admitted.gang_of_admitted` describes;
- today's gang API (Kubernetes v1.36+): a pod's `spec.schedulingGroup` names a scheduling.k8s.io
  PodGroup, maybe under CompositePodGroups (`group_member`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import msgspec

from muster.api.model import (
    CompositePodGroup,
    Pod,
    PodGroup,
    PriorityClass,
    SchedulingPodGroup,
    SchedulingWorkload,
    WorkloadRef,
)
from muster.api.wellknown import POD_GROUP_LABEL, WORKLOAD_LABEL
from muster.core.placement.inputs import (
    created_at_s,
    pod_topology,
    required_topology,
    resolve_priority,
)
from muster.core.placement.model import NO_DEADLINE, CompositeSpec, GangKey, GangSpec

_NO_GANGS: Mapping[str, GangSpec] = MappingProxyType({})


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
        topology=required_topology(group.policy.topology_key),
        workload="" if owner == pod.key else owner,  # the same for every pod of the gang
        parents=tuple(
            CompositeSpec(
                key=GangKey(c.key),
                min_groups=c.policy.min_count or 1,
                topology=required_topology(c.policy.topology_key),
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
        seen = [c.key for c in chain]
        if key in seen:
            return [], _cycle_problem(group.key, seen[seen.index(key) :])
        chain.append(found)
        if len(chain) > MAX_COMPOSITE_DEPTH:
            loop = _cycle_above(found, groups)
            if loop:
                return [], _cycle_problem(group.key, loop)
            return [], f"more than {MAX_COMPOSITE_DEPTH + 1} levels of groups above {group.key}"
        workloads.add(found.workload_name)
        parent = found.parent
    if len(workloads) > 1:
        names = ", ".join(sorted(workloads))
        return [], f"the groups above {group.key} belong to several Workloads ({names})"
    return chain, ""


_CYCLE_SEARCH = 64  # parents followed past the depth limit to tell a cycle from a deep tree


def _cycle_above(start: CompositePodGroup, groups: GroupIndex) -> list[str]:
    """The CompositePodGroups of the loop `start`'s parents run into, in parent order (empty
    when they end, or do not loop within `_CYCLE_SEARCH`): a loop longer than the depth limit
    is still named as one, so the user fixes the loop rather than the depth."""
    path = [start.key]
    namespace, parent = start.meta.namespace, start.parent
    for _ in range(_CYCLE_SEARCH):
        key = f"{namespace}/{parent}"
        found = groups.composites.get(key) if parent else None
        if found is None:
            return []
        if key in path:
            return path[path.index(key) :]
        path.append(key)
        parent = found.parent
    return []


def _cycle_problem(group: str, loop: list[str]) -> str:
    """Each group of the loop back to the first, from the smallest name (every pod of every
    group under it says the same), as ClusterQueues' CohortCycle names a cohort cycle."""
    start = loop.index(min(loop))
    ring = [*loop[start:], *loop[:start]]
    shown = " -> ".join([*ring, ring[0]])
    return f"the CompositePodGroups above {group} form the cycle {shown}"


def _disruption_unit(
    pod: str, group: SchedulingPodGroup, chain: list[CompositePodGroup]
) -> tuple[str, bool]:
    """What a preemption evicts with the pod: the outermost group with disruption mode `all`
    (a CompositePodGroup's whole subtree), else the pod alone."""
    for composite in reversed(chain):
        if composite.policy.disruption == "all":
            return composite.key, True
    return (group.key, False) if group.policy.disruption == "all" else (pod, False)


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
