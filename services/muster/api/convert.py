"""Wire structs of Kueue's kinds (v1beta1 and v1beta2) to the normalized model.

`muster.api.decode` calls one `*_from_raw` per document. Version differences are resolved
here: cohort/cohortName, parent/parentName, Borrow/Preempt vs MayStopSearch, admissionChecks vs
admissionChecksStrategy, priorityClassName+Source vs priorityClassRef. Problems go to `errs`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from muster.api.errors import ObjectErrors, key_path
from muster.api.ids import uuid5_text
from muster.api.model import (
    Admission,
    AdmissionCheckState,
    AdmissionCheckStrategyRule,
    BorrowWithinCohort,
    ClusterQueue,
    Cohort,
    Condition,
    FlavorFungibility,
    FlavorFungibilityPreference,
    FlavorQuotas,
    FungibilityPolicy,
    LabelSelector,
    LabelSelectorRequirement,
    LocalQueue,
    Namespace,
    ObjectMeta,
    OwnerReference,
    PodSet,
    PodSetAssignment,
    Preemption,
    PriorityClass,
    PriorityClassSource,
    ReclaimablePod,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Taint,
    Workload,
    WorkloadPriorityClass,
)
from muster.api.names import check_reference, qualified_name_problem
from muster.api.podspec import pod_set_from_template, tolerations
from muster.api.quantity import QuantityError, parse_exact
from muster.api.raw import (
    RawAdmission,
    RawClusterQueue,
    RawCohort,
    RawFairSharing,
    RawFlavorFungibility,
    RawLabelSelector,
    RawLocalQueue,
    RawMeta,
    RawNamespace,
    RawPodSet,
    RawPriorityClass,
    RawReclaimablePod,
    RawResourceFlavor,
    RawResourceGroup,
    RawWorkload,
    RawWorkloadPriorityClass,
    RawWorkloadSpec,
)

KUEUE_V1BETA1 = "kueue.x-k8s.io/v1beta1"
KUEUE_V1BETA2 = "kueue.x-k8s.io/v1beta2"
WORKLOAD_PRIORITY_CLASS: PriorityClassSource = "kueue.x-k8s.io/workloadpriorityclass"
POD_PRIORITY_CLASS: PriorityClassSource = "scheduling.k8s.io/priorityclass"
_SOURCE_BY_GROUP: dict[str, tuple[PriorityClassSource, str]] = {
    "kueue.x-k8s.io": (WORKLOAD_PRIORITY_CLASS, "WorkloadPriorityClass"),
    "scheduling.k8s.io": (POD_PRIORITY_CLASS, "PriorityClass"),
}


def stable_uid(kind: str, namespace: str, name: str) -> str:
    """Return a uid derived from an object's identity, for objects written without one.

    Core breaks ties on uids; deriving them keeps runs over the same files identical.
    """
    return uuid5_text(uuid.NAMESPACE_URL, f"muster:{kind}/{namespace}/{name}")


def meta_from_raw(raw: RawMeta, *, namespace: str = "") -> ObjectMeta:
    """Return the model's metadata; `namespace` is "" for cluster-scoped kinds."""
    return ObjectMeta(
        name=raw.name,
        namespace=namespace,
        uid=raw.uid,
        labels=dict(raw.labels),
        annotations=dict(raw.annotations),
        creation_timestamp=raw.creation_timestamp,
        generation=raw.generation,
        owner_references=tuple(
            OwnerReference(
                api_version=o.api_version,
                kind=o.kind,
                name=o.name,
                uid=o.uid,
                controller=o.controller,
            )
            for o in raw.owner_references
        ),
    )


def resource_flavor_from_raw(
    raw: RawResourceFlavor, meta: ObjectMeta, errs: ObjectErrors
) -> ResourceFlavor:
    spec = raw.spec
    return ResourceFlavor(
        meta=meta,
        node_labels=dict(spec.node_labels),
        node_taints=tuple(
            Taint(key=t.key, value=t.value, effect=t.effect) for t in spec.node_taints
        ),
        tolerations=tolerations(spec.tolerations),
        topology_name=spec.topology_name,
    )


def cluster_queue_from_raw(
    raw: RawClusterQueue, meta: ObjectMeta, errs: ObjectErrors
) -> ClusterQueue:
    spec = raw.spec
    return ClusterQueue(
        meta=meta,
        cohort=_either(errs, "spec", ("cohort", spec.cohort), ("cohortName", spec.cohort_name)),
        resource_groups=_resource_groups(spec.resource_groups, errs),
        queueing_strategy=spec.queueing_strategy,
        namespace_selector=_selector(spec.namespace_selector) if spec.namespace_selector else None,
        preemption=_preemption(raw),
        flavor_fungibility=_fungibility(spec.flavor_fungibility, errs, version=raw.api_version),
        admission_checks=_admission_checks(raw, errs),
        stop_policy=spec.stop_policy,
        fair_sharing_weight=_weight(spec.fair_sharing, errs),
        admission_mode=spec.admission_scope.admission_mode if spec.admission_scope else None,
    )


def cohort_from_raw(raw: RawCohort, meta: ObjectMeta, errs: ObjectErrors) -> Cohort:
    spec = raw.spec
    return Cohort(
        meta=meta,
        parent=_either(errs, "spec", ("parent", spec.parent), ("parentName", spec.parent_name)),
        resource_groups=_resource_groups(spec.resource_groups, errs),
        fair_sharing_weight=_weight(spec.fair_sharing, errs),
    )


def local_queue_from_raw(raw: RawLocalQueue, meta: ObjectMeta, errs: ObjectErrors) -> LocalQueue:
    check_reference(errs, raw.spec.cluster_queue, "spec.clusterQueue")
    return LocalQueue(
        meta=meta,
        cluster_queue=raw.spec.cluster_queue,
        stop_policy=raw.spec.stop_policy,
        fair_sharing_weight=_weight(raw.spec.fair_sharing, errs),
    )


def workload_priority_class_from_raw(
    raw: RawWorkloadPriorityClass, meta: ObjectMeta, errs: ObjectErrors
) -> WorkloadPriorityClass:
    return WorkloadPriorityClass(meta=meta, value=raw.value, description=raw.description)


def priority_class_from_raw(
    raw: RawPriorityClass, meta: ObjectMeta, errs: ObjectErrors
) -> PriorityClass:
    return PriorityClass(meta=meta, value=raw.value, global_default=raw.global_default)


def namespace_from_raw(raw: RawNamespace, meta: ObjectMeta, errs: ObjectErrors) -> Namespace:
    return Namespace(meta=meta)


def workload_from_raw(
    raw: RawWorkload,
    meta: ObjectMeta,
    errs: ObjectErrors,
    *,
    pod_sets: tuple[PodSet, ...] | None = None,
) -> Workload:
    """`raw` in the model; `pod_sets`, when given, are its podsets as `pod_set_of` reads them
    (a reader that keeps them per template spares reading a template it has read before)."""
    spec = raw.spec
    check_reference(errs, spec.queue_name, "spec.queueName")
    check_reference(errs, spec.priority_class_name, "spec.priorityClassName")
    for p, ps in enumerate(spec.pod_sets):
        check_reference(errs, ps.name, f"spec.podSets[{p}].name", label=True)
    if pod_sets is None:
        pod_sets = tuple(pod_set_of(ps, errs, index=p) for p, ps in enumerate(spec.pod_sets))
    counts = {ps.name: ps.count for ps in pod_sets}
    name, source = _priority_class(spec, errs)
    status = raw.status
    return Workload(
        meta=meta,
        queue_name=spec.queue_name,
        pod_sets=pod_sets,
        priority=spec.priority,
        priority_class_name=name,
        priority_class_source=source,
        active=spec.active,
        admission=_admission(status.admission, counts, errs) if status.admission else None,
        conditions=tuple(
            Condition(type=c.type, status=c.status, reason=c.reason, message=c.message)
            for c in status.conditions
        ),
        admission_checks=tuple(
            AdmissionCheckState(
                name=a.name, state=a.state, message=a.message, retry_count=a.retry_count
            )
            for a in status.admission_checks
        ),
        reclaimable_pods=_reclaimable_pods(status.reclaimable_pods, counts, errs),
    )


def pod_set_of(raw: RawPodSet, errs: ObjectErrors, *, index: int) -> PodSet:
    """The podset `spec.podSets[index]` of a Workload, `raw`."""
    return pod_set_from_template(
        raw.template,
        errs,
        name=raw.name,
        count=raw.count,
        min_count=raw.min_count,
        path=f"spec.podSets[{index}].template",
    )


# --- pieces -----------------------------------------------------------------------------------


def _reclaimable_pods(
    raw: list[RawReclaimablePod], counts: Mapping[str, int], errs: ObjectErrors
) -> tuple[ReclaimablePod, ...]:
    """status.reclaimablePods as Kueue's webhook admits it: each names a podset once, with a
    count from 0 to that podset's count (validateReclaimablePods)."""
    seen: set[str] = set()
    for i, rp in enumerate(raw):
        path = f"status.reclaimablePods[{i}]"
        if rp.name not in counts:
            known = ", ".join(counts) or "none"
            errs.add(f"{path}.name", f'"{rp.name}" is not a podset of the workload ({known})')
        elif rp.name in seen:
            errs.add(f"{path}.name", f'"{rp.name}" is listed twice')
        elif not 0 <= rp.count <= counts[rp.name]:
            errs.add(f"{path}.count", f"must be between 0 and {counts[rp.name]}, got {rp.count}")
        seen.add(rp.name)
    return tuple(ReclaimablePod(name=rp.name, count=rp.count) for rp in raw)


def _either(
    errs: ObjectErrors, base: str, first: tuple[str, str | None], second: tuple[str, str | None]
) -> str | None:
    """Return the one name given under either spelling; both given and different is an error."""
    (first_name, first_value), (second_name, second_value) = first, second
    check_reference(errs, first_value, f"{base}.{first_name}")
    check_reference(errs, second_value, f"{base}.{second_name}")
    if first_value and second_value and first_value != second_value:
        errs.add(
            f"{base}.{second_name}",
            f'"{second_value}" differs from {base}.{first_name} "{first_value}"; set only one',
        )
    return first_value or second_value or None


def _resource_groups(raw: list[RawResourceGroup], errs: ObjectErrors) -> tuple[ResourceGroup, ...]:
    groups: list[ResourceGroup] = []
    for g, group in enumerate(raw):
        for r, resource in enumerate(group.covered_resources):
            _check_resource_name(errs, resource, f"spec.resourceGroups[{g}].coveredResources[{r}]")
        flavors: list[FlavorQuotas] = []
        for f, flavor in enumerate(group.flavors):
            check_reference(errs, flavor.name, f"spec.resourceGroups[{g}].flavors[{f}].name")
            quotas: list[ResourceQuota] = []
            for r, quota in enumerate(flavor.resources):
                path = f"spec.resourceGroups[{g}].flavors[{f}].resources[{r}]"
                _check_resource_name(errs, quota.name, f"{path}.name")
                quotas.append(
                    ResourceQuota(
                        name=quota.name,
                        nominal_quota=errs.quantity(
                            quota.nominal_quota, f"{path}.nominalQuota", non_negative=False
                        ),
                        borrowing_limit=_optional_quantity(
                            quota.borrowing_limit, f"{path}.borrowingLimit", errs
                        ),
                        lending_limit=_optional_quantity(
                            quota.lending_limit, f"{path}.lendingLimit", errs
                        ),
                    )
                )
            flavors.append(FlavorQuotas(name=flavor.name, resources=tuple(quotas)))
        groups.append(
            ResourceGroup(covered_resources=tuple(group.covered_resources), flavors=tuple(flavors))
        )
    return tuple(groups)


def _check_resource_name(errs: ObjectErrors, name: str, path: str) -> None:
    problem = qualified_name_problem(name)
    if problem is not None:
        errs.add(path, f"resource name: {problem}")


def _optional_quantity(value: object, path: str, errs: ObjectErrors) -> int | None:
    # Signs are checked in muster.api.validate, which sees the whole ClusterQueue.
    return None if value is None else errs.quantity(value, path, non_negative=False)


def _weight(fair_sharing: RawFairSharing | None, errs: ObjectErrors) -> float:
    if fair_sharing is None or fair_sharing.weight is None:
        return 1.0
    try:
        return float(parse_exact(fair_sharing.weight))
    except QuantityError as exc:
        errs.add("spec.fairSharing.weight", str(exc))
        return 1.0


def _selector(raw: RawLabelSelector) -> LabelSelector:
    return LabelSelector(
        match_labels=dict(raw.match_labels),
        match_expressions=tuple(
            LabelSelectorRequirement(key=e.key, operator=e.operator, values=tuple(e.values))
            for e in raw.match_expressions
        ),
    )


def _preemption(raw: RawClusterQueue) -> Preemption:
    preemption = raw.spec.preemption
    if preemption is None:
        return Preemption()
    borrow = preemption.borrow_within_cohort
    return Preemption(
        within_cluster_queue=preemption.within_cluster_queue,
        reclaim_within_cohort=preemption.reclaim_within_cohort,
        borrow_within_cohort=(
            BorrowWithinCohort(
                policy=borrow.policy, max_priority_threshold=borrow.max_priority_threshold
            )
            if borrow
            else BorrowWithinCohort()
        ),
    )


def _fungibility(
    raw: RawFlavorFungibility | None, errs: ObjectErrors, *, version: str
) -> FlavorFungibility:
    """Return flavor fungibility; v1beta1's Borrow and Preempt mean MayStopSearch."""
    if raw is None:
        return FlavorFungibility()
    default = FlavorFungibility()
    fields = (
        ("whenCanBorrow", raw.when_can_borrow, "Borrow"),
        ("whenCanPreempt", raw.when_can_preempt, "Preempt"),
    )
    chosen: list[FungibilityPolicy] = []
    for (name, value, old_spelling), fallback in zip(
        fields, (default.when_can_borrow, default.when_can_preempt), strict=True
    ):
        if value is None:
            chosen.append(fallback)
        elif value == old_spelling:
            if version != KUEUE_V1BETA1:
                errs.add(
                    f"spec.flavorFungibility.{name}",
                    f"{value} is a {KUEUE_V1BETA1} value; use MayStopSearch in {version}",
                )
            chosen.append(FungibilityPolicy.MAY_STOP_SEARCH)
        else:
            chosen.append(FungibilityPolicy(value))
    if raw.preference is None:
        return FlavorFungibility(when_can_borrow=chosen[0], when_can_preempt=chosen[1])
    if any(policy is not FungibilityPolicy.TRY_NEXT_FLAVOR for policy in chosen):
        errs.add(
            "spec.flavorFungibility.preference",
            "preference can only be set when both whenCanBorrow and whenCanPreempt are "
            "TryNextFlavor",
        )
    return FlavorFungibility(
        when_can_borrow=chosen[0],
        when_can_preempt=chosen[1],
        preference=FlavorFungibilityPreference(raw.preference),
    )


def _admission_checks(
    raw: RawClusterQueue, errs: ObjectErrors
) -> tuple[AdmissionCheckStrategyRule, ...]:
    names, strategy = raw.spec.admission_checks, raw.spec.admission_checks_strategy
    if names and strategy is not None:
        errs.add("spec.admissionChecksStrategy", "cannot be set together with spec.admissionChecks")
    for i, name in enumerate(names or ()):
        check_reference(errs, name, f"spec.admissionChecks[{i}]")
    rules = [AdmissionCheckStrategyRule(name=n) for n in names or ()]
    if strategy is not None:
        base = "spec.admissionChecksStrategy.admissionChecks"
        for i, rule in enumerate(strategy.admission_checks):
            check_reference(errs, rule.name, f"{base}[{i}].name")
            for j, flavor in enumerate(rule.on_flavors):
                check_reference(errs, flavor, f"{base}[{i}].onFlavors[{j}]")
        rules.extend(
            AdmissionCheckStrategyRule(name=r.name, on_flavors=tuple(r.on_flavors))
            for r in strategy.admission_checks
        )
    return tuple(rules)


def _priority_class(
    spec: RawWorkloadSpec, errs: ObjectErrors
) -> tuple[str | None, PriorityClassSource | None]:
    """Return (name, source) from v1beta1's priorityClassName+Source or v1beta2's priorityClassRef.

    A v1beta1 name with an empty source names a scheduling.k8s.io PriorityClass.
    """
    old: tuple[str | None, PriorityClassSource | None] = (None, None)
    if spec.priority_class_name:
        source = spec.priority_class_source or POD_PRIORITY_CLASS
        if source not in (WORKLOAD_PRIORITY_CLASS, POD_PRIORITY_CLASS):
            errs.add(
                "spec.priorityClassSource",
                f'must be "{WORKLOAD_PRIORITY_CLASS}" or "{POD_PRIORITY_CLASS}", got "{source}"',
            )
            source = POD_PRIORITY_CLASS
        old = (spec.priority_class_name, source)
    ref = spec.priority_class_ref
    if ref is None:
        return old
    if ref.group not in _SOURCE_BY_GROUP:
        errs.add(
            "spec.priorityClassRef.group",
            f'must be "kueue.x-k8s.io" or "scheduling.k8s.io", got "{ref.group}"',
        )
        return old
    source, kind = _SOURCE_BY_GROUP[ref.group]
    if ref.kind != kind:
        errs.add(
            "spec.priorityClassRef.kind",
            f'must be "{kind}" for group {ref.group}, got "{ref.kind}"',
        )
    if not ref.name:
        errs.add("spec.priorityClassRef.name", "is required")
    check_reference(errs, ref.name, "spec.priorityClassRef.name")
    if old[0] is not None and old != (ref.name, source):
        errs.add("spec.priorityClassRef", "differs from spec.priorityClassName; set only one")
    return ref.name, source


def _admission(raw: RawAdmission, counts: dict[str, int], errs: ObjectErrors) -> Admission:
    check_reference(errs, raw.cluster_queue, "status.admission.clusterQueue")
    assignments = []
    for a, assignment in enumerate(raw.pod_set_assignments):
        path = f"status.admission.podSetAssignments[{a}].resourceUsage"
        usage = {
            name: errs.quantity(value, key_path(path, name))
            for name, value in assignment.resource_usage.items()
        }
        count = assignment.count if assignment.count is not None else counts.get(assignment.name, 0)
        most = counts.get(assignment.name)
        if most is not None and not 0 <= count <= most:  # more pods than its podset has
            where = f"status.admission.podSetAssignments[{a}].count"
            errs.add(where, f"must be between 0 and the podset's count {most}, got {count}")
        assignments.append(
            PodSetAssignment(
                name=assignment.name,
                flavors=dict(assignment.flavors),
                count=count,
                resource_usage=usage,
            )
        )
    return Admission(cluster_queue=raw.cluster_queue, pod_set_assignments=tuple(assignments))
