"""Pod templates to podsets: per-pod requests, node selector, tolerations and required affinity.

Used by `muster.api.convert` (Kueue Workloads), `muster.api.job` (batch/v1 Jobs) and
`muster.api.cluster_objects` (Pods), so all compute a pod's requests the way Kubernetes does.
`admitted_pod_set` is a podset as admitted (its flavors' node labels and tolerations added), as
the binder starts it and gang placement places it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from muster.api.errors import ObjectErrors, key_path
from muster.api.model import (
    ContainerResources,
    LabelSelector,
    LabelSelectorRequirement,
    PodResources,
    PodSet,
    ResourceFlavor,
    Taint,
    Toleration,
    Workload,
)
from muster.api.names import annotation_problems, label_problems
from muster.api.raw import (
    RawContainer,
    RawPodSpec,
    RawPodTemplate,
    RawResourceRequirements,
    RawTaint,
    RawToleration,
)
from muster.api.wellknown import (
    POD_SCRIPT_ANNOTATIONS,
    PREFERRED_TOPOLOGY_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
)

_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_POD_LEVEL = frozenset({"cpu", "memory"})


def container_resources(
    container: RawContainer, errs: ObjectErrors, *, path: str
) -> ContainerResources:
    """Return one container's requests and limits as written (`path` is the container's)."""
    resources = container.resources
    return ContainerResources(
        requests=errs.quantities(resources.requests, f"{path}.resources.requests"),
        limits=errs.quantities(resources.limits, f"{path}.resources.limits"),
        sidecar=container.restart_policy == "Always",
    )


def pod_resources(spec: RawPodSpec, errs: ObjectErrors, *, path: str) -> PodResources:
    """Return a pod spec's resources container by container; `path` is the spec's."""
    pod = spec.resources
    return PodResources(
        containers=tuple(
            container_resources(c, errs, path=f"{path}.containers[{i}]")
            for i, c in enumerate(spec.containers)
        ),
        init_containers=tuple(
            container_resources(c, errs, path=f"{path}.initContainers[{i}]")
            for i, c in enumerate(spec.init_containers)
        ),
        overhead=errs.quantities(spec.overhead, f"{path}.overhead"),
        pod=None if pod is None else _pod_level_resources(pod, errs, path=f"{path}.resources"),
        runtime_class_name=spec.runtime_class_name or "",
    )


def _pod_level_resources(
    raw: RawResourceRequirements, errs: ObjectErrors, *, path: str
) -> ContainerResources | None:
    """A pod's own spec.resources; None when empty. Resources a pod may not set are refused,
    as the API server refuses them."""
    own = ContainerResources(
        requests=errs.quantities(raw.requests, f"{path}.requests"),
        limits=errs.quantities(raw.limits, f"{path}.limits"),
    )
    for field, amounts in (("requests", own.requests), ("limits", own.limits)):
        for name in sorted(r for r in amounts if not pod_level(r)):
            errs.add(
                key_path(f"{path}.{field}", name),
                "is not supported at pod level: only cpu, memory and hugepages-<size>",
            )
    return own if own.requests or own.limits else None


def pod_level(resource: str) -> bool:
    """Whether a pod's own spec.resources may set `resource` (Kubernetes' PodLevelResources:
    cpu, memory and hugepages); its other entries are not the pod's to set."""
    return resource in _POD_LEVEL or resource.startswith("hugepages-")


def effective_requests(container: ContainerResources) -> dict[str, int]:
    """A container's requests, a resource with a limit but no request taking the limit.

    That is the defaulting Kubernetes applies before a pod is stored (and Kueue's
    UseLimitsAsMissingRequestsInPod for a template).
    """
    return {**container.limits, **container.requests}


def requests_of(resources: PodResources) -> dict[str, int]:
    """Return what one pod requests, per resource, in milli-units.

    Kubernetes' rule (component-helpers' PodRequests): the larger of (regular containers plus
    sidecars) and the peak of the init phase, where each regular init container runs alongside
    the sidecars started before it; then the pod's own requests (a limit with no request taken
    as it) replace that total for the resources a pod may set; then pod overhead is added.
    Sidecars are init containers with `restartPolicy: Always`.
    """
    running: dict[str, int] = {}
    for container in resources.containers:
        _add(running, effective_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in resources.init_containers:
        requests = effective_requests(container)
        if container.sidecar:
            _add(sidecars, requests)
            _raise_to(init_peak, sidecars)
        else:
            _raise_to(init_peak, _summed(sidecars, requests))
    total = _summed(running, sidecars)
    _raise_to(total, init_peak)
    if resources.pod is not None:
        own = effective_requests(resources.pod)
        total.update((r, v) for r, v in own.items() if pod_level(r))
    _add(total, dict(resources.overhead))
    return total


def written_resources(ps: PodSet) -> PodResources:
    """`ps`'s containers as written; a podset that keeps none has one container asking its
    per-pod requests (what `just_requests` leaves out, and what a Kueue reader of a podset
    known only by its total sees)."""
    if ps.resources is not None:
        return ps.resources
    return PodResources(containers=(ContainerResources(requests=ps.requests),))


def just_requests(resources: PodResources) -> bool:
    """At most one container, with requests only: its total says it all, and a podset keeps
    no `resources` (every podset of a plain template compares and encodes as before)."""
    if resources.init_containers or resources.overhead or len(resources.containers) > 1:
        return False
    if resources.pod is not None or resources.runtime_class_name:
        return False
    return not any(c.limits for c in resources.containers)


def pod_requests(spec: RawPodSpec, errs: ObjectErrors, *, path: str) -> dict[str, int]:
    """Return what one pod of `spec` requests (`requests_of`); `path` is the spec's."""
    return requests_of(pod_resources(spec, errs, path=path))


def taints(raw: Iterable[RawTaint]) -> tuple[Taint, ...]:
    """Return taints in the model's shape (a Node's, or those a ResourceFlavor puts on nodes)."""
    return tuple(Taint(key=t.key, value=t.value, effect=t.effect) for t in raw)


def tolerations(raw: Iterable[RawToleration]) -> tuple[Toleration, ...]:
    """Return tolerations in the model's shape (tolerationSeconds does not affect admission)."""
    return tuple(
        Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect) for t in raw
    )


def node_affinity_terms(
    spec: RawPodSpec, errs: ObjectErrors, *, path: str
) -> tuple[LabelSelector, ...]:
    """Return the required node-affinity terms as label selectors (any term may match).

    Gt/Lt and matchFields have no label-selector equivalent and are reported, not dropped.
    """
    affinity = spec.affinity
    node_affinity = affinity.node_affinity if affinity else None
    required = (
        node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    )
    if required is None:
        return ()
    base = f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms: list[LabelSelector] = []
    for t, term in enumerate(required.node_selector_terms):
        term_path = f"{base}.nodeSelectorTerms[{t}]"
        if term.match_fields:
            errs.add(f"{term_path}.matchFields", "is not supported; use matchExpressions on labels")
        expressions: list[LabelSelectorRequirement] = []
        for e, expr in enumerate(term.match_expressions):
            if expr.operator not in _SELECTOR_OPERATORS:
                errs.add(
                    f"{term_path}.matchExpressions[{e}].operator",
                    f"{expr.operator} is not supported; use In, NotIn, Exists or DoesNotExist",
                )
                continue
            expressions.append(
                LabelSelectorRequirement(
                    key=expr.key,
                    operator=expr.operator,  # type: ignore[arg-type]  # checked just above
                    values=tuple(expr.values),
                )
            )
        terms.append(LabelSelector(match_expressions=tuple(expressions)))
    return tuple(terms)


def pod_set_from_template(
    template: RawPodTemplate,
    errs: ObjectErrors,
    *,
    name: str,
    count: int,
    min_count: int | None,
    path: str,
) -> PodSet:
    """Return the podset for `count` pods of `template`; `path` is the template's YAML path."""
    spec_path = f"{path}.spec"
    meta = template.metadata
    # The pods made from the template carry these: checked as the API server checks a pod's.
    for field, problem in label_problems(meta.labels, path=f"{path}.metadata.labels"):
        errs.add(field, problem)
    for field, problem in annotation_problems(
        meta.annotations, path=f"{path}.metadata.annotations"
    ):
        errs.add(field, problem)
    check_topology_annotations(meta.annotations, errs, path=f"{path}.metadata.annotations")
    resources = pod_resources(template.spec, errs, path=spec_path)
    return PodSet(
        name=name,
        count=count,
        min_count=min_count,
        requests=requests_of(resources),
        resources=None if just_requests(resources) else resources,
        node_selector=dict(template.spec.node_selector),
        tolerations=tolerations(template.spec.tolerations),
        node_affinity_terms=node_affinity_terms(template.spec, errs, path=spec_path),
        annotations=dict(template.metadata.annotations),
        scheduling_group=group.pod_group_name if (group := template.spec.scheduling_group) else "",
    )


def check_topology_annotations(
    annotations: Mapping[str, str], errs: ObjectErrors, *, path: str
) -> None:
    """Record problems with Kueue's podset topology annotations; `path` is the annotations'.

    At most one of required and preferred may be set, and it must name a node label key.
    """
    for annotation in (REQUIRED_TOPOLOGY_ANNOTATION, PREFERRED_TOPOLOGY_ANNOTATION):
        if annotation in annotations and not annotations[annotation]:
            errs.add(key_path(path, annotation), "must name a node label key")
    if REQUIRED_TOPOLOGY_ANNOTATION in annotations and PREFERRED_TOPOLOGY_ANNOTATION in annotations:
        errs.add(
            key_path(path, PREFERRED_TOPOLOGY_ANNOTATION),
            f"must not be set together with {REQUIRED_TOPOLOGY_ANNOTATION}",
        )


def flavor_placement(
    flavor_names: Iterable[str], flavors: Mapping[str, ResourceFlavor]
) -> tuple[dict[str, str], tuple[Toleration, ...]]:
    """Return the node labels and tolerations that the named flavors put on a podset's pods.

    Flavors are merged in name order (a later one's label wins); unknown names add nothing.
    """
    node_labels: dict[str, str] = {}
    found: list[Toleration] = []
    for name in sorted(set(flavor_names)):
        flavor = flavors.get(name)
        if flavor is None:
            continue
        node_labels.update(flavor.node_labels)
        found.extend(t for t in flavor.tolerations if t not in found)
    return node_labels, tuple(found)


class AdmittedCountError(ValueError):
    """An admission gives a podset more pods than its spec has, or fewer than none."""


def admitted_pod_set(
    wl: Workload,
    ps: PodSet,
    *,
    count: int,
    node_labels: Mapping[str, str],
    tolerations: Iterable[Toleration],
) -> PodSet:
    """Return podset `ps` of `wl` as admitted: `count` pods (partial admission may shrink it;
    AdmittedCountError past `ps.count` or below 0: a hostile admission asking for 2^31 pods
    would otherwise have them made, one object each, until memory ran out).

    The flavors' `node_labels` are merged into the node selector (they win over the template's
    own value for the same key) and their `tolerations` added when not already there; the
    workload's `muster.dev/run-seconds` and readiness annotations (`POD_SCRIPT_ANNOTATIONS`)
    are copied when the template has none (the simulated kubelet reads them on the pod).
    """
    if not 0 <= count <= ps.count:
        raise AdmittedCountError(
            f"admission of {wl.key}: podset {ps.name!r} admitted with {count} pods, "
            f"outside 0..{ps.count} (its count)"
        )
    node_selector = {**ps.node_selector, **node_labels}
    merged = list(ps.tolerations)
    merged += [t for t in tolerations if t not in merged]
    annotations = dict(ps.annotations)
    for key in POD_SCRIPT_ANNOTATIONS:
        value = wl.meta.annotations.get(key)
        if value is not None:
            annotations.setdefault(key, value)
    return msgspec.structs.replace(
        ps,
        count=count,
        node_selector=node_selector,
        tolerations=tuple(merged),
        annotations=annotations,
    )


def _add(into: dict[str, int], more: dict[str, int]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def _summed(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    total = dict(a)
    _add(total, b)
    return total


def _raise_to(into: dict[str, int], floor: dict[str, int]) -> None:
    for name, value in floor.items():
        into[name] = max(into.get(name, 0), value)
