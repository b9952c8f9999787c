"""Semantic checks on single decoded objects, the ones Kueue's webhooks and the API server make.

Each check is a generator of FieldErrors; `validate` chains those for an object's kind.
`muster.api.decode` runs them on every object; the gateway can run them on objects it builds.
Checks across objects (unknown flavor or queue, cohort cycles) are the engine's: it reports
them as conditions.
"""

from __future__ import annotations

from collections.abc import Iterator

from muster.api.errors import FieldError
from muster.api.model import (
    ApiObject,
    ClusterQueue,
    Cohort,
    KueueConfig,
    LocalQueue,
    Pod,
    PodGroup,
    Preemption,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    SchedulingWorkload,
    Workload,
)
from muster.api.quantity import format_quantity, negative_problem


def identity(obj: ApiObject) -> str:
    """Return how messages name `obj`: "ClusterQueue/team-a", "Workload/ml/train-7"."""
    if isinstance(obj, KueueConfig):
        return "Configuration"
    # A scheduling.k8s.io Workload is named as written, like Kueue's.
    kind = "Workload" if isinstance(obj, SchedulingWorkload) else type(obj).__name__
    if obj.meta.namespace:
        return f"{kind}/{obj.meta.namespace}/{obj.meta.name}"
    return f"{kind}/{obj.meta.name}"


def validate(
    obj: ApiObject,
    *,
    name: str | None = None,
    api_version: str = "kueue.x-k8s.io/v1beta2",
    stored: bool = False,
) -> list[FieldError]:
    """Return every problem with `obj` alone.

    `name` overrides how messages name the object; `api_version` picks field spellings in
    paths where the versions differ (a Cohort's `spec.parent` in v1beta1). `stored`: `obj`
    was taken in before (a stored event's manifest, an object read from a cluster): rules
    added since for new objects (`check_variable_pod_sets`) are not applied again, so what
    an earlier release accepted is still read after an upgrade.
    """
    who = name or identity(obj)
    if isinstance(obj, ClusterQueue):
        return [
            *check_resource_groups(obj.resource_groups, who, has_parent=obj.cohort is not None),
            *check_preemption(obj.preemption, who),
            *check_weight(obj.fair_sharing_weight, who),
        ]
    if isinstance(obj, Cohort):
        return [
            *check_resource_groups(obj.resource_groups, who, has_parent=obj.parent is not None),
            *check_weight(obj.fair_sharing_weight, who),
            *check_parent(obj, who, api_version=api_version),
        ]
    if isinstance(obj, Workload):
        entry = [] if stored else check_variable_pod_sets(obj, who)
        return [*check_pod_sets(obj, who), *entry]
    if isinstance(obj, LocalQueue):
        empty = (
            [] if obj.cluster_queue else [FieldError(who, "spec.clusterQueue", "must not be empty")]
        )
        return [*empty, *check_weight(obj.fair_sharing_weight, who)]
    if isinstance(obj, SchedulingWorkload):  # later versions are checked as they convert
        return list(check_pod_groups(obj, who)) if obj.api_version.endswith("/v1alpha1") else []
    if isinstance(obj, PodGroup):
        return list(check_pod_group(obj, who))
    if isinstance(obj, Pod):
        return list(check_workload_ref(obj, who))
    return []


# Kueue's CRD: MaxItems=16 on spec.resourceGroups, 64 on each group's coveredResources and
# flavors. Without them one ClusterQueue of 10 000 flavors (600 KB of YAML) was taken, and
# every admission round then tried each flavor for each head.
MAX_RESOURCE_GROUPS = 16
MAX_GROUP_ITEMS = 64


def check_resource_groups(
    groups: tuple[ResourceGroup, ...], who: str, *, has_parent: bool
) -> Iterator[FieldError]:
    """Quotas are non-negative; each flavor lists exactly the covered resources, in order.

    A resource and a flavor may each appear in one group only. Borrowing and lending limits
    need a cohort (for a Cohort: a parent), and a lending limit cannot exceed nominal quota.
    At most 16 groups, each of at most 64 resources and 64 flavors, as Kueue's CRD allows.
    """
    if len(groups) > MAX_RESOURCE_GROUPS:
        yield FieldError(
            who,
            "spec.resourceGroups",
            f"must list at most {MAX_RESOURCE_GROUPS} groups, got {len(groups)}",
        )
        return
    covered_by: dict[str, int] = {}
    flavor_at: dict[str, str] = {}
    for g, group in enumerate(groups):
        group_path = f"spec.resourceGroups[{g}]"
        if not group.covered_resources:
            yield FieldError(who, f"{group_path}.coveredResources", "must list at least 1 resource")
        if not group.flavors:
            yield FieldError(who, f"{group_path}.flavors", "must list at least 1 flavor")
        too_many = [
            (field, len(items))
            for field, items in (
                ("coveredResources", group.covered_resources),
                ("flavors", group.flavors),
            )
            if len(items) > MAX_GROUP_ITEMS
        ]
        for field, count in too_many:
            yield FieldError(
                who, f"{group_path}.{field}", f"must list at most {MAX_GROUP_ITEMS}, got {count}"
            )
        if too_many:
            continue  # one line, not one per flavor
        for r, resource in enumerate(group.covered_resources):
            if resource in covered_by:
                yield FieldError(
                    who,
                    f"{group_path}.coveredResources[{r}]",
                    f"{resource} is already covered by spec.resourceGroups[{covered_by[resource]}]",
                )
            else:
                covered_by[resource] = g
        for f, flavor in enumerate(group.flavors):
            flavor_path = f"{group_path}.flavors[{f}]"
            if flavor.name in flavor_at:
                yield FieldError(
                    who,
                    f"{flavor_path}.name",
                    f"{flavor.name} is already at {flavor_at[flavor.name]}",
                )
            else:
                flavor_at[flavor.name] = flavor_path
            names = tuple(q.name for q in flavor.resources)
            if names != group.covered_resources:
                yield FieldError(
                    who,
                    f"{flavor_path}.resources",
                    f"must list the covered resources in order"
                    f" [{', '.join(group.covered_resources)}], got [{', '.join(names)}]",
                )
            for r, quota in enumerate(flavor.resources):
                yield from _check_quota(quota, f"{flavor_path}.resources[{r}]", who, has_parent)


def _check_quota(
    quota: ResourceQuota, path: str, who: str, has_parent: bool
) -> Iterator[FieldError]:
    limits = (
        ("nominalQuota", quota.nominal_quota),
        ("borrowingLimit", quota.borrowing_limit),
        ("lendingLimit", quota.lending_limit),
    )
    for field, value in limits:
        problem = negative_problem(value) if value is not None else None
        if problem:
            yield FieldError(who, f"{path}.{field}", problem)
    for field, value in limits[1:]:
        if value is not None and not has_parent:
            yield FieldError(who, f"{path}.{field}", "must not be set without a cohort")
    lending = quota.lending_limit
    if lending is not None and lending > quota.nominal_quota >= 0:
        yield FieldError(
            who,
            f"{path}.lendingLimit",
            f"must be <= nominalQuota {format_quantity(quota.nominal_quota)},"
            f" got {format_quantity(lending)}",
        )


def check_preemption(preemption: Preemption, who: str) -> Iterator[FieldError]:
    """borrowWithinCohort needs reclaimWithinCohort other than Never (Kueue's CEL rule)."""
    policy = preemption.borrow_within_cohort.policy
    if preemption.reclaim_within_cohort == ReclaimWithinCohort.NEVER and policy != "Never":
        yield FieldError(
            who,
            "spec.preemption.borrowWithinCohort.policy",
            f"must be Never when reclaimWithinCohort is Never, got {policy}",
        )


def check_weight(weight: float, who: str) -> Iterator[FieldError]:
    if weight < 0:
        yield FieldError(who, "spec.fairSharing.weight", f"must be >= 0, got {weight:g}")


def check_parent(cohort: Cohort, who: str, *, api_version: str) -> Iterator[FieldError]:
    if cohort.parent == cohort.name:
        field = "spec.parent" if api_version.endswith("/v1beta1") else "spec.parentName"
        yield FieldError(who, field, f"a Cohort cannot be its own parent ({cohort.name})")


# Kueue's CRD (v0.19 on: MaxItems=18 on spec.podSets; 8 before v0.17, then 10). The Workload
# API's podGroups stay at 8 (MAX_POD_GROUPS).
MAX_POD_SETS = 18


# Differs from Kueue (docs/kueue-compatibility.md): at most 100 000 pods in a workload, the bound
# Kubernetes puts on an Indexed Job's parallelism. The binder and gang-permit make every pod of
# an admitted workload at once, one object each: a Job of parallelism 1 000 000 asking for no
# quota held 2-3 GB in each, stopped answering its liveness probe and was killed, then again
# on every restart (the stored admission replayed).
MAX_WORKLOAD_PODS = 100_000


def check_pod_sets(wl: Workload, who: str) -> Iterator[FieldError]:
    """1 to 18 podsets; names unique; count >= 0; 1 <= minCount <= count; 100 000 pods in all."""
    if not wl.pod_sets:
        yield FieldError(who, "spec.podSets", "must list at least 1 podset")
    if len(wl.pod_sets) > MAX_POD_SETS:
        yield FieldError(
            who, "spec.podSets", f"must list at most {MAX_POD_SETS} podsets, got {len(wl.pod_sets)}"
        )
    pods = sum(max(ps.count, 0) for ps in wl.pod_sets)
    if pods > MAX_WORKLOAD_PODS:
        yield FieldError(
            who,
            "spec.podSets",
            f"must ask for at most {MAX_WORKLOAD_PODS} pods in all (podsets' count), got {pods}",
        )
    seen: set[str] = set()
    for p, ps in enumerate(wl.pod_sets):
        path = f"spec.podSets[{p}]"
        if ps.name in seen:
            yield FieldError(who, f"{path}.name", f"duplicate podset name {ps.name}")
        seen.add(ps.name)
        if ps.count < 0:
            yield FieldError(who, f"{path}.count", f"must be >= 0, got {ps.count}")
        if ps.min_count is not None and not 1 <= ps.min_count <= max(ps.count, 1):
            yield FieldError(
                who, f"{path}.minCount", f"must be >= 1 and <= count {ps.count}, got {ps.min_count}"
            )


def check_variable_pod_sets(wl: Workload, who: str) -> Iterator[FieldError]:
    """At most one podset with minCount (Kueue's Workload webhook: partial admission shrinks
    one podset). For new objects only: muster accepted several before, and stored ones are
    still read."""
    variable = [p for p, ps in enumerate(wl.pod_sets) if ps.min_count is not None]
    for p in variable[1:]:
        yield FieldError(
            who,
            f"spec.podSets[{p}].minCount",
            f"at most one podset may set minCount; spec.podSets[{variable[0]}] already does",
        )


MAX_POD_GROUPS = 8  # the Workload API's limit on spec.podGroups


def check_pod_groups(wl: SchedulingWorkload, who: str) -> Iterator[FieldError]:
    """1 to 8 pod groups, names unique and set, a gang's minCount >= 1, a complete controllerRef.

    The API server's checks on a scheduling.k8s.io/v1alpha1 Workload.
    """
    if not 1 <= len(wl.pod_groups) <= MAX_POD_GROUPS:
        yield FieldError(
            who,
            "spec.podGroups",
            f"must list 1 to {MAX_POD_GROUPS} pod groups, got {len(wl.pod_groups)}",
        )
    seen: set[str] = set()
    for g, group in enumerate(wl.pod_groups):
        path = f"spec.podGroups[{g}]"
        if not group.name:
            yield FieldError(who, f"{path}.name", "is required")
        elif group.name in seen:
            yield FieldError(who, f"{path}.name", f"duplicate pod group name {group.name}")
        seen.add(group.name)
        count = group.policy.min_count
        if count is not None and count < 1:
            yield FieldError(who, f"{path}.policy.gang.minCount", f"must be >= 1, got {count}")
    ref = wl.controller_ref
    if ref is not None:
        for field, value in (("kind", ref.kind), ("name", ref.name)):
            if not value:
                yield FieldError(who, f"spec.controllerRef.{field}", "is required")


def check_pod_group(group: PodGroup, who: str) -> Iterator[FieldError]:
    """minMember >= 1; scheduleTimeoutSeconds > 0 when given."""
    if group.min_member < 1:
        yield FieldError(who, "spec.minMember", f"must be >= 1, got {group.min_member}")
    timeout = group.schedule_timeout_seconds
    if timeout is not None and timeout <= 0:
        yield FieldError(who, "spec.scheduleTimeoutSeconds", f"must be > 0, got {timeout:g}")


def check_workload_ref(pod: Pod, who: str) -> Iterator[FieldError]:
    """A pod's workloadRef names both its Workload and its pod group."""
    ref = pod.workload_ref
    if ref is None:
        return
    for field, value in (("name", ref.name), ("podGroup", ref.pod_group)):
        if not value:
            yield FieldError(who, f"spec.workloadRef.{field}", "is required")
