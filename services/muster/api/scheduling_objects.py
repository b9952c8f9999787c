"""Today's Kubernetes gang API to the model: scheduling.k8s.io Workloads, PodGroups and
CompositePodGroups of v1alpha2 (Kubernetes v1.36), v1beta1 and v1alpha3 (v1.37), and a Job's
`spec.scheduling`.

`muster.api.decode` calls one `*_from_raw` per document. Each reports, with its field path,
what the API server's validation refuses (a policy that is neither or both of basic and gang, a
second topology key, an unknown disruption mode, a CompositePodGroup without its Workload,
templates nested deeper than four levels); gang placement reads the results
(`muster.core.placement.sources`).
"""

from __future__ import annotations

import math
import re

import msgspec

from muster.api.errors import ObjectErrors, key_path
from muster.api.model import (
    CompositePodGroup,
    Condition,
    Disruption,
    GroupPolicy,
    GroupTemplate,
    ObjectMeta,
    OwnerReference,
    PreemptionPolicy,
    SchedulingPodGroup,
    SchedulingWorkload,
)
from muster.api.raw import (
    RawDisruptionMode,
    RawEmpty,
    RawGang,
    RawJobScheduling,
    RawSchedulingConstraints,
    RawSchedulingPolicy,
    RawTypedLocalObjectReference,
)
from muster.api.scheduling_raw import (
    RawGroup,
    RawGroupStatus,
    RawGroupTemplate,
    RawGroupWorkload,
    RawPodGroupSpecV1Alpha2,
    RawPodGroupTemplateV1Alpha2,
    RawPodGroupV1Alpha2,
    RawWorkloadV1Alpha2,
)
from muster.api.wellknown import GANG_TIMEOUT_ANNOTATION

SCHEDULING_GROUP = "scheduling.k8s.io"
SCHEDULING_V1ALPHA2 = "scheduling.k8s.io/v1alpha2"
SCHEDULING_V1BETA1 = "scheduling.k8s.io/v1beta1"
SCHEDULING_V1ALPHA3 = "scheduling.k8s.io/v1alpha3"

MAX_TEMPLATES = 8  # per list of a Workload or composite template
MAX_DEPTH = 4  # WorkloadMaxTreeDepth: a root and three levels below it
MAX_PRIORITY = 1_000_000_000  # user-set priorities stop here (higher ones are the system's)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# v1.36's disruption modes and what v1.37 renamed them to.
_V1ALPHA2_DISRUPTION: dict[str, Disruption] = {"Pod": "single", "PodGroup": "all"}
_PREEMPTION_POLICIES: tuple[PreemptionPolicy, ...] = ("PreemptLowerPriority", "Never")


# --- Workloads --------------------------------------------------------------------------------


def group_workload_v1alpha2_from_raw(
    raw: RawWorkloadV1Alpha2, meta: ObjectMeta, errs: ObjectErrors
) -> SchedulingWorkload:
    """A v1.36 Workload: 1 to 8 pod group templates, names unique."""
    spec = raw.spec
    templates = tuple(
        GroupTemplate(name=t.name, policy=_v1alpha2_policy(t, errs, f"spec.podGroupTemplates[{i}]"))
        for i, t in enumerate(spec.pod_group_templates)
    )
    _check_list(templates, "spec.podGroupTemplates", errs, required=True)
    return _workload(meta, raw.api_version, templates, spec.controller_ref, errs)


def group_workload_from_raw(
    raw: RawGroupWorkload, meta: ObjectMeta, errs: ObjectErrors
) -> SchedulingWorkload:
    """A v1.37 Workload: exactly one of podGroupTemplates and compositePodGroupTemplates, each
    at most 8, nested at most 4 deep, template names unique in the whole tree."""
    spec = raw.spec
    plain, composite = spec.pod_group_templates, spec.composite_pod_group_templates
    if bool(plain) == bool(composite):
        errs.add("spec", "must set exactly one of podGroupTemplates or compositePodGroupTemplates")
    templates = _templates(plain, composite, errs, path="spec", depth=1)
    return _workload(meta, raw.api_version, templates, spec.controller_ref, errs)


def _workload(
    meta: ObjectMeta,
    api_version: str,
    templates: tuple[GroupTemplate, ...],
    ref: RawTypedLocalObjectReference | None,
    errs: ObjectErrors,
) -> SchedulingWorkload:
    _check_names(templates, "spec", errs)
    return SchedulingWorkload(
        meta=meta,
        api_version=api_version,
        templates=templates,
        controller_ref=_controller_ref(ref, errs),
    )


def _templates(
    plain: list[RawGroupTemplate],
    composite: list[RawGroupTemplate],
    errs: ObjectErrors,
    *,
    path: str,
    depth: int,
) -> tuple[GroupTemplate, ...]:
    found: list[GroupTemplate] = []
    for field, raws, is_composite in (
        ("podGroupTemplates", plain, False),
        ("compositePodGroupTemplates", composite, True),
    ):
        if len(raws) > MAX_TEMPLATES:
            errs.add(f"{path}.{field}", f"must list at most {MAX_TEMPLATES}, got {len(raws)}")
        for i, t in enumerate(raws):
            found.append(_template(t, errs, f"{path}.{field}[{i}]", is_composite, depth))
    return tuple(found)


def _template(
    raw: RawGroupTemplate, errs: ObjectErrors, path: str, composite: bool, depth: int
) -> GroupTemplate:
    if depth > MAX_DEPTH:
        errs.add(path, f"templates may nest at most {MAX_DEPTH} deep")
        return GroupTemplate(name=raw.name, composite=composite)
    children: tuple[GroupTemplate, ...] = ()
    if composite:
        if not raw.pod_group_templates and not raw.composite_pod_group_templates:
            errs.add(path, "must set podGroupTemplates or compositePodGroupTemplates")
        children = _templates(
            raw.pod_group_templates,
            raw.composite_pod_group_templates,
            errs,
            path=path,
            depth=depth + 1,
        )
    elif raw.pod_group_templates or raw.composite_pod_group_templates:
        errs.add(path, "a pod group template has no templates of its own")
    policy = _policy(
        raw.scheduling_policy,
        raw.scheduling_constraints,
        raw.disruption_mode,
        errs,
        path=path,
        composite=composite,
    )
    policy = _with_priority(
        policy, raw.priority_class_name, raw.priority, raw.preemption_policy, errs, path
    )
    return GroupTemplate(name=raw.name, policy=policy, composite=composite, children=children)


def _check_list(
    templates: tuple[GroupTemplate, ...], path: str, errs: ObjectErrors, *, required: bool
) -> None:
    if required and not templates:
        errs.add(path, "must list at least one template")
    if len(templates) > MAX_TEMPLATES:
        errs.add(path, f"must list at most {MAX_TEMPLATES}, got {len(templates)}")


def _check_names(templates: tuple[GroupTemplate, ...], path: str, errs: ObjectErrors) -> None:
    """Every template is named with a DNS label, once in the whole tree (PodGroups name their
    template by name alone)."""
    seen: set[str] = set()

    def walk(found: tuple[GroupTemplate, ...]) -> None:
        for t in found:
            if not t.name:
                errs.add(path, "every template needs a name")
            elif not _DNS_LABEL.fullmatch(t.name) or len(t.name) > 63:
                errs.add(path, f"template name {t.name!r} must be a DNS label")
            elif t.name in seen:
                errs.add(path, f"duplicate template name {t.name!r}")
            seen.add(t.name)
            walk(t.children)

    walk(templates)


def _controller_ref(
    ref: RawTypedLocalObjectReference | None, errs: ObjectErrors
) -> OwnerReference | None:
    if ref is None:
        return None
    for field, value in (("kind", ref.kind), ("name", ref.name)):
        if not value:
            errs.add(f"spec.controllerRef.{field}", "is required")
    return OwnerReference(api_version=ref.api_group, kind=ref.kind, name=ref.name, controller=True)


# --- PodGroups and CompositePodGroups ---------------------------------------------------------


def scheduling_pod_group_v1alpha2_from_raw(
    raw: RawPodGroupV1Alpha2, meta: ObjectMeta, errs: ObjectErrors
) -> SchedulingPodGroup:
    """A v1.36 PodGroup; its template reference names a Workload and a template, or nothing."""
    spec = raw.spec
    workload = spec.pod_group_template_ref.workload if spec.pod_group_template_ref else None
    if spec.pod_group_template_ref is not None and workload is None:
        errs.add("spec.podGroupTemplateRef.workload", "is required")
    if workload is not None:
        for field, value in (
            ("workloadName", workload.workload_name),
            ("podGroupTemplateName", workload.pod_group_template_name),
        ):
            if not value:
                errs.add(f"spec.podGroupTemplateRef.workload.{field}", "is required")
    return SchedulingPodGroup(
        meta=meta,
        api_version=raw.api_version,
        workload_name=workload.workload_name if workload else "",
        template_name=workload.pod_group_template_name if workload else "",
        policy=_v1alpha2_policy(spec, errs, "spec"),
        conditions=_conditions(raw.status),
        timeout_s=_timeout(meta, errs),
    )


def scheduling_pod_group_from_raw(
    raw: RawGroup, meta: ObjectMeta, errs: ObjectErrors
) -> SchedulingPodGroup:
    """A v1.37 PodGroup; a parent CompositePodGroup needs a workloadRef too."""
    spec = raw.spec
    workload, template = _workload_ref(raw, errs, required=False)
    if spec.parent_composite_pod_group_name and not workload:
        errs.add("spec.workloadRef", "is required with spec.parentCompositePodGroupName")
    return SchedulingPodGroup(
        meta=meta,
        api_version=raw.api_version,
        workload_name=workload,
        template_name=template,
        parent=spec.parent_composite_pod_group_name,
        policy=_group_policy(raw, errs, composite=False),
        conditions=_conditions(raw.status),
        timeout_s=_timeout(meta, errs),
    )


def composite_pod_group_from_raw(
    raw: RawGroup, meta: ObjectMeta, errs: ObjectErrors
) -> CompositePodGroup:
    """A v1alpha3 CompositePodGroup: its workloadRef is required; gang counts child groups."""
    workload, template = _workload_ref(raw, errs, required=True)
    return CompositePodGroup(
        meta=meta,
        api_version=raw.api_version,
        workload_name=workload,
        template_name=template,
        parent=raw.spec.parent_composite_pod_group_name,
        policy=_group_policy(raw, errs, composite=True),
        conditions=_conditions(raw.status),
        timeout_s=_timeout(meta, errs),
    )


def _workload_ref(raw: RawGroup, errs: ObjectErrors, *, required: bool) -> tuple[str, str]:
    ref = raw.spec.workload_ref
    if ref is None:
        if required:
            errs.add("spec.workloadRef", "is required")
        return "", ""
    for field, value in (("workloadName", ref.workload_name), ("templateName", ref.template_name)):
        if not value:
            errs.add(f"spec.workloadRef.{field}", "is required")
    return ref.workload_name, ref.template_name


def _group_policy(raw: RawGroup, errs: ObjectErrors, *, composite: bool) -> GroupPolicy:
    spec = raw.spec
    policy = _policy(
        spec.scheduling_policy,
        spec.scheduling_constraints,
        spec.disruption_mode,
        errs,
        path="spec",
        composite=composite,
    )
    return _with_priority(
        policy, spec.priority_class_name, spec.priority, spec.preemption_policy, errs, "spec"
    )


def _timeout(meta: ObjectMeta, errs: ObjectErrors) -> float | None:
    """muster's gang deadline, turned on by annotation: a finite number of seconds > 0."""
    text = meta.annotations.get(GANG_TIMEOUT_ANNOTATION)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        path = key_path("metadata.annotations", GANG_TIMEOUT_ANNOTATION)
        errs.add(path, f"must be a finite number of seconds > 0, got {text!r}")
        return None
    return value


def _conditions(status: RawGroupStatus) -> tuple[Condition, ...]:
    return tuple(
        Condition(type=c.type, status=c.status, reason=c.reason, message=c.message)
        for c in status.conditions
    )


# --- a Job's spec.scheduling ------------------------------------------------------------------


def job_scheduling(raw: RawJobScheduling, *, parallelism: int, errs: ObjectErrors) -> GroupPolicy:
    """The policy of a Job's pods: basic when no schedulingPolicy is written; a gang's minCount
    defaults to `parallelism` and may not exceed it."""
    path = "spec.scheduling"
    policy = raw.scheduling_policy
    if policy is not None and policy.gang is not None and policy.gang.min_count is None:
        policy = RawSchedulingPolicy(gang=RawGang(min_count=parallelism))
    found = _policy(
        policy if policy is not None else RawSchedulingPolicy(basic=RawEmpty()),
        raw.scheduling_constraints,
        raw.disruption_mode,
        errs,
        path=path,
        composite=False,
    )
    if found.min_count is not None and found.min_count > parallelism:
        errs.add(
            f"{path}.schedulingPolicy.gang.minCount",
            f"must be <= spec.parallelism {parallelism}, got {found.min_count}",
        )
    return found


# --- policy pieces ----------------------------------------------------------------------------


def _policy(
    policy: RawSchedulingPolicy | None,
    constraints: RawSchedulingConstraints | None,
    disruption: RawDisruptionMode | None,
    errs: ObjectErrors,
    *,
    path: str,
    composite: bool,
) -> GroupPolicy:
    return GroupPolicy(
        min_count=_min_count(policy, errs, f"{path}.schedulingPolicy", composite=composite),
        topology_key=_topology(constraints, errs, f"{path}.schedulingConstraints"),
        disruption=_disruption(disruption, errs, f"{path}.disruptionMode"),
    )


def _v1alpha2_policy(
    raw: RawPodGroupTemplateV1Alpha2 | RawPodGroupSpecV1Alpha2, errs: ObjectErrors, path: str
) -> GroupPolicy:
    """v1.36 spelled the disruption mode as a string: "Pod" (single) or "PodGroup" (all)."""
    policy = _policy(
        raw.scheduling_policy, raw.scheduling_constraints, None, errs, path=path, composite=False
    )
    if raw.disruption_mode is not None:
        found = _V1ALPHA2_DISRUPTION.get(raw.disruption_mode)
        if found is None:
            errs.add(
                f"{path}.disruptionMode",
                f'must be "Pod" or "PodGroup", got "{raw.disruption_mode}"',
            )
        else:
            policy = msgspec.structs.replace(policy, disruption=found)
    return _with_priority(policy, raw.priority_class_name, raw.priority, "", errs, path)


def _min_count(
    policy: RawSchedulingPolicy | None, errs: ObjectErrors, path: str, *, composite: bool
) -> int | None:
    """The gang's minimum (None: basic); exactly one of basic and gang, a gang's count >= 1."""
    if policy is None:
        errs.add(path, "is required")
        return None
    if (policy.basic is None) == (policy.gang is None):
        errs.add(path, "must set exactly one of basic or gang")
        return None
    if policy.gang is None:
        return None
    field, count = (
        ("minGroupCount", policy.gang.min_group_count)
        if composite
        else ("minCount", policy.gang.min_count)
    )
    if count is None:
        errs.add(f"{path}.gang.{field}", "is required")
        return None
    if count < 1:
        errs.add(f"{path}.gang.{field}", f"must be >= 1, got {count}")
        return None
    return count


def _topology(constraints: RawSchedulingConstraints | None, errs: ObjectErrors, path: str) -> str:
    """The one topology key, if any: the API allows at most one."""
    entries = constraints.topology if constraints is not None else []
    if len(entries) > 1:
        errs.add(f"{path}.topology", f"must list at most 1 entry, got {len(entries)}")
    if not entries:
        return ""
    if not entries[0].key:
        errs.add(f"{path}.topology[0].key", "is required")
    return entries[0].key


def _disruption(raw: RawDisruptionMode | None, errs: ObjectErrors, path: str) -> Disruption:
    if raw is None:
        return "single"
    if (raw.single is None) == (raw.all is None):
        errs.add(path, "must set exactly one of single or all")
        return "single"
    return "all" if raw.all is not None else "single"


def _with_priority(
    policy: GroupPolicy,
    class_name: str,
    priority: int | None,
    preemption_policy: str,
    errs: ObjectErrors,
    path: str,
) -> GroupPolicy:
    if priority is not None and priority > MAX_PRIORITY:
        errs.add(f"{path}.priority", f"must be <= {MAX_PRIORITY}, got {priority}")
    chosen: PreemptionPolicy = "PreemptLowerPriority"
    if preemption_policy:
        if preemption_policy in _PREEMPTION_POLICIES:
            chosen = "Never" if preemption_policy == "Never" else "PreemptLowerPriority"
        else:
            errs.add(
                f"{path}.preemptionPolicy",
                f'must be "Never" or "PreemptLowerPriority", got "{preemption_policy}"',
            )
    return GroupPolicy(
        min_count=policy.min_count,
        topology_key=policy.topology_key,
        disruption=policy.disruption,
        priority_class_name=class_name,
        priority=priority,
        preemption_policy=chosen,
    )
