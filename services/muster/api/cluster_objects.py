"""Wire structs of the cluster's kinds to the model: v1 Node and Pod, the Workload API's
scheduling.k8s.io/v1alpha1 Workload, and scheduler-plugins' PodGroup.

`muster.api.decode` calls one `*_from_raw` per document; what only the wire shape shows (a
policy with both or neither of basic and gang, a bad quantity or timestamp) is reported here,
the rest by `muster.api.validate`. Gang placement reads the results
(`muster.core.placement.sources`).
"""

from __future__ import annotations

from collections.abc import Iterable

from muster.api.errors import ObjectErrors
from muster.api.model import (
    Node,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodGroup,
    PodGroupPolicy,
    SchedulingWorkload,
    WorkloadPodGroup,
    WorkloadRef,
)
from muster.api.names import check_reference
from muster.api.podspec import node_affinity_terms, pod_requests, taints, tolerations
from muster.api.raw import (
    RawNode,
    RawPod,
    RawPodGroup,
    RawSchedulingWorkload,
    RawStatusCondition,
    RawWorkloadPodGroup,
)
from muster.api.times import timestamp_problem
from muster.api.wellknown import DEFAULT_SCHEDULER

SCHEDULING_V1ALPHA1 = "scheduling.k8s.io/v1alpha1"
SCHEDULER_PLUGINS_V1ALPHA1 = "scheduling.x-k8s.io/v1alpha1"


def node_from_raw(raw: RawNode, meta: ObjectMeta, errs: ObjectErrors) -> Node:
    """status.allocatable, or status.capacity when allocatable is not written (both checked)."""
    _check_created(meta, errs)
    status = raw.status
    capacity = errs.quantities(status.capacity, "status.capacity")
    allocatable = errs.quantities(status.allocatable, "status.allocatable")
    return Node(
        meta=meta,
        taints=taints(raw.spec.taints),
        unschedulable=raw.spec.unschedulable,
        ready=is_ready(status.conditions),
        allocatable=allocatable or capacity,
    )


def is_ready(conditions: Iterable[RawStatusCondition]) -> bool:
    """A node is ready unless its Ready condition says "False" or "Unknown".

    A node with no Ready condition is taken as ready: hand-written scenario nodes rarely have
    one, and a kubelet always writes it.
    """
    for condition in conditions:
        if condition.type == "Ready":
            return condition.status == "True"
    return True


def pod_from_raw(raw: RawPod, meta: ObjectMeta, errs: ObjectErrors) -> Pod:
    """Requests combined as Kubernetes does; an unset schedulerName is the default scheduler."""
    _check_created(meta, errs)
    spec = raw.spec
    ref = spec.workload_ref
    group = spec.scheduling_group
    if group is not None and not group.pod_group_name:
        errs.add("spec.schedulingGroup.podGroupName", "is required")
    if group is not None and ref is not None:
        errs.add("spec.schedulingGroup", "cannot be set together with spec.workloadRef")
    if ref is not None:
        check_reference(errs, ref.name, "spec.workloadRef.name")
        check_reference(errs, ref.pod_group, "spec.workloadRef.podGroup")
        check_reference(errs, ref.pod_group_replica_key, "spec.workloadRef.podGroupReplicaKey")
    return Pod(
        meta=meta,
        scheduler_name=spec.scheduler_name or DEFAULT_SCHEDULER,
        node_name=spec.node_name,
        phase=raw.status.phase,
        requests=pod_requests(spec, errs, path="spec"),
        node_selector=dict(spec.node_selector),
        node_affinity_terms=node_affinity_terms(spec, errs, path="spec"),
        tolerations=tolerations(spec.tolerations),
        priority=spec.priority,
        priority_class_name=spec.priority_class_name or None,
        workload_ref=(
            WorkloadRef(
                name=ref.name,
                pod_group=ref.pod_group,
                pod_group_replica_key=ref.pod_group_replica_key,
            )
            if ref is not None
            else None
        ),
        scheduling_group=group.pod_group_name if group is not None else "",
    )


def scheduling_workload_from_raw(
    raw: RawSchedulingWorkload, meta: ObjectMeta, errs: ObjectErrors
) -> SchedulingWorkload:
    """The pod groups and controllerRef (its apiGroup kept in `api_version`)."""
    _check_created(meta, errs)
    spec = raw.spec
    ref = spec.controller_ref
    return SchedulingWorkload(
        meta=meta,
        pod_groups=tuple(
            _pod_group(group, errs, path=f"spec.podGroups[{g}]")
            for g, group in enumerate(spec.pod_groups)
        ),
        controller_ref=(
            OwnerReference(api_version=ref.api_group, kind=ref.kind, name=ref.name, controller=True)
            if ref is not None
            else None
        ),
    )


def _pod_group(raw: RawWorkloadPodGroup, errs: ObjectErrors, *, path: str) -> WorkloadPodGroup:
    """Exactly one of `policy.basic` and `policy.gang`; a gang states its minCount."""
    check_reference(errs, raw.name, f"{path}.name")
    policy = raw.policy
    if policy is None or (policy.basic is None) == (policy.gang is None):
        errs.add(f"{path}.policy", "must set exactly one of basic or gang")
        return WorkloadPodGroup(name=raw.name)
    if policy.gang is None:
        return WorkloadPodGroup(name=raw.name)
    if policy.gang.min_count is None:
        errs.add(f"{path}.policy.gang.minCount", "is required")
    return WorkloadPodGroup(name=raw.name, policy=PodGroupPolicy(min_count=policy.gang.min_count))


def pod_group_from_raw(raw: RawPodGroup, meta: ObjectMeta, errs: ObjectErrors) -> PodGroup:
    """minMember defaults to 1; no scheduleTimeoutSeconds leaves the scheduler's default."""
    _check_created(meta, errs)
    spec = raw.spec
    timeout = spec.schedule_timeout_seconds
    return PodGroup(
        meta=meta,
        min_member=1 if spec.min_member is None else spec.min_member,
        schedule_timeout_seconds=None if timeout is None else float(timeout),
    )


def _check_created(meta: ObjectMeta, errs: ObjectErrors) -> None:
    """Gang placement orders by creation time, so a bad one is an error, not a silent zero."""
    problem = timestamp_problem(meta.creation_timestamp)
    if problem is not None:
        errs.add("metadata.creationTimestamp", problem)
