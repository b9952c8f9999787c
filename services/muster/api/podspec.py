"""Pod templates to podsets: per-pod requests, node selector, tolerations and required affinity.

Used by `muster.api.convert` (Kueue Workloads) and `muster.api.job` (batch/v1 Jobs), so both
compute a pod's requests the way Kubernetes does.
"""

from __future__ import annotations

from collections.abc import Iterable

from muster.api.errors import ObjectErrors
from muster.api.model import LabelSelector, LabelSelectorRequirement, PodSet, Toleration
from muster.api.raw import RawContainer, RawPodSpec, RawPodTemplate, RawToleration

_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def container_requests(container: RawContainer, errs: ObjectErrors, *, path: str) -> dict[str, int]:
    """Return one container's requests; a resource with a limit but no request uses the limit.

    That is the defaulting Kubernetes applies before a pod is stored.
    """
    resources = container.resources
    limits = errs.quantities(resources.limits, f"{path}.resources.limits")
    requests = errs.quantities(resources.requests, f"{path}.resources.requests")
    return {**limits, **requests}


def pod_requests(spec: RawPodSpec, errs: ObjectErrors, *, path: str) -> dict[str, int]:
    """Return what one pod requests, per resource, in milli-units.

    Kubernetes' rule: the larger of (regular containers plus sidecars) and the peak of the init
    phase, where each regular init container runs alongside the sidecars started before it;
    then pod overhead is added. Sidecars are init containers with `restartPolicy: Always`.
    """
    running: dict[str, int] = {}
    for c, container in enumerate(spec.containers):
        _add(running, container_requests(container, errs, path=f"{path}.containers[{c}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(spec.init_containers):
        requests = container_requests(container, errs, path=f"{path}.initContainers[{i}]")
        if container.restart_policy == "Always":
            _add(sidecars, requests)
            _raise_to(init_peak, sidecars)
        else:
            _raise_to(init_peak, _summed(sidecars, requests))
    total = _summed(running, sidecars)
    _raise_to(total, init_peak)
    _add(total, errs.quantities(spec.overhead, f"{path}.overhead"))
    return total


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
    return PodSet(
        name=name,
        count=count,
        min_count=min_count,
        requests=pod_requests(template.spec, errs, path=spec_path),
        node_selector=dict(template.spec.node_selector),
        tolerations=tolerations(template.spec.tolerations),
        node_affinity_terms=node_affinity_terms(template.spec, errs, path=spec_path),
        annotations=dict(template.metadata.annotations),
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
