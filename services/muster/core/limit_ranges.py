"""A namespace's LimitRanges applied to a workload's podsets, as Kueue applies them.

Kueue adjusts a pending workload's podsets before it queues them (pkg/workload AdjustResources,
on every create and update, and again for every workload not holding quota when a LimitRange
of its namespace changes), then validates them in the scheduler (ValidateResources, then
ValidateLimitRange), after the namespace selector. The rules, in Kueue's order:

1. Pod overhead: the template's own, else its RuntimeClass's (`muster.core.pod_overhead`).
2. The LimitRanges of the workload's namespace are summarized (`summarize`): per type, the
   lowest `max`, the highest `min`, the first `default` and `defaultRequest` (LimitRanges in
   name order). The Container entry's `default` fills the limits and its `defaultRequest` the
   requests each container (init containers and sidecars too) leaves unset.
3. A limit with no request is taken as the request.
4. Inadmissible, whatever the quota, when a container requests more than its limit; then,
   when the namespace has any LimitRange, when a container's requests or limits are above the
   Container `max` or below its `min`, or the pod's total (containers, the init peak,
   overhead) is above the Pod `max` or below its `min`.

Pure: the caller passes the LimitRanges and the RuntimeClasses, and gets a podset (or a
message) back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from muster.api.encode import is_byte_resource
from muster.api.limit_range import CONTAINER, POD
from muster.api.model import (
    ContainerResources,
    Frozen,
    LimitRange,
    PodResources,
    PodSet,
    RuntimeClass,
    Workload,
)
from muster.api.podspec import effective_requests, requests_of, written_resources
from muster.api.quantity import format_quantity
from muster.core.pod_overhead import RUNTIME_CLASS_PROBLEM, overhead_problem, with_overhead

INVALID_RESOURCES: Final = "resources validation failed"
NO_RUNTIME_CLASSES: Final[Mapping[str, RuntimeClass]] = {}
UNSATISFIED_LIMIT_RANGE: Final = "resources didn't satisfy LimitRange constraints"


class Bounds(Frozen, frozen=True, kw_only=True):
    """One type's entries of a namespace's LimitRanges, merged; `*_from` name the LimitRange
    each bound comes from, for the message."""

    max: Mapping[str, int] = msgspec.field(default_factory=dict)
    max_from: Mapping[str, str] = msgspec.field(default_factory=dict)
    min: Mapping[str, int] = msgspec.field(default_factory=dict)
    min_from: Mapping[str, str] = msgspec.field(default_factory=dict)
    default: Mapping[str, int] = msgspec.field(default_factory=dict)
    default_request: Mapping[str, int] = msgspec.field(default_factory=dict)
    # The lowest maxLimitRequestRatio (milli-units: 2000 is a ratio of 2); only the API
    # server's LimitRanger checks it, on pods (`pod_problems`), not Kueue.
    max_ratio: Mapping[str, int] = msgspec.field(default_factory=dict)


class Summary(Frozen, frozen=True, kw_only=True):
    """A namespace's LimitRanges as Kueue's limitrange.Summarize merges them."""

    container: Bounds | None = None
    pod: Bounds | None = None


def summarize(ranges: Iterable[LimitRange]) -> Summary | None:
    """The merged bounds of `ranges` (one namespace's), or None when there is none at all:
    then only requests-over-limits is checked, as in Kueue."""
    found = sorted(ranges, key=lambda lr: lr.meta.name)
    if not found:
        return None
    merged: dict[str, _Merging] = {}
    for lr in found:
        for item in lr.limits:
            if item.type in (CONTAINER, POD):
                merged.setdefault(item.type, _Merging()).add(item.max, item.min, lr.meta.name)
                merged[item.type].defaults(item.default, item.default_request)
                merged[item.type].ratios(item.max_limit_request_ratio)
    return Summary(
        container=merged[CONTAINER].bounds() if CONTAINER in merged else None,
        pod=merged[POD].bounds() if POD in merged else None,
    )


class _Merging:
    """Bounds being merged: lowest max, highest min, first default and defaultRequest."""

    def __init__(self) -> None:
        self.max: dict[str, int] = {}
        self.max_from: dict[str, str] = {}
        self.min: dict[str, int] = {}
        self.min_from: dict[str, str] = {}
        self.default: dict[str, int] = {}
        self.default_request: dict[str, int] = {}
        self.max_ratio: dict[str, int] = {}

    def add(self, high: Mapping[str, int], low: Mapping[str, int], name: str) -> None:
        for resource, value in high.items():
            if resource not in self.max or value < self.max[resource]:
                self.max[resource], self.max_from[resource] = value, name
        for resource, value in low.items():
            if resource not in self.min or value > self.min[resource]:
                self.min[resource], self.min_from[resource] = value, name

    def defaults(self, default: Mapping[str, int], request: Mapping[str, int]) -> None:
        self.default = {**default, **self.default}
        self.default_request = {**request, **self.default_request}

    def ratios(self, ratios: Mapping[str, int]) -> None:
        for resource, ratio in ratios.items():
            self.max_ratio[resource] = min(ratio, self.max_ratio.get(resource, ratio))

    def bounds(self) -> Bounds:
        return Bounds(
            max=self.max,
            max_from=self.max_from,
            min=self.min,
            min_from=self.min_from,
            default=self.default,
            default_request=self.default_request,
            max_ratio=self.max_ratio,
        )


def adjusted_resources(written: PodResources, summary: Summary | None) -> PodResources:
    """`written` with the Container defaults filled in and limits taken as missing requests
    (rules 2 and 3)."""
    bounds = summary.container if summary is not None else None

    def adjust(c: ContainerResources) -> ContainerResources:
        limits = {**bounds.default, **c.limits} if bounds is not None else c.limits
        requests = {**bounds.default_request, **c.requests} if bounds is not None else c.requests
        filled = ContainerResources(requests=requests, limits=limits, sidecar=c.sidecar)
        return msgspec.structs.replace(filled, requests=effective_requests(filled))

    return msgspec.structs.replace(
        written,
        containers=tuple(adjust(c) for c in written.containers),
        init_containers=tuple(adjust(c) for c in written.init_containers),
        pod=None if written.pod is None else _pod_limits_as_requests(written.pod),
    )


def _pod_limits_as_requests(pod: ContainerResources) -> ContainerResources:
    # A Pod LimitRange entry has no defaults (muster.api.limit_range), so only rule 3 applies.
    return msgspec.structs.replace(pod, requests=effective_requests(pod))


def adjusted_workload(
    wl: Workload,
    summary: Summary | None,
    classes: Mapping[str, RuntimeClass] = NO_RUNTIME_CLASSES,
) -> Workload:
    """`wl` with each podset's per-pod requests as Kueue charges them in a namespace whose
    LimitRanges are `summary`, in a cluster whose RuntimeClasses are `classes`; `wl` itself
    when nothing changes. The podsets keep their containers as written, so adjusting again
    under other LimitRanges or RuntimeClasses starts from them."""
    pod_sets = tuple(_adjusted_pod_set(ps, summary, classes) for ps in wl.pod_sets)
    if all(new is old for new, old in zip(pod_sets, wl.pod_sets, strict=True)):
        return wl
    return msgspec.structs.replace(wl, pod_sets=pod_sets)


def _adjusted_pod_set(
    ps: PodSet, summary: Summary | None, classes: Mapping[str, RuntimeClass]
) -> PodSet:
    if ps.resources is None and summary is None:
        return ps  # one container with requests only: nothing to add
    written = written_resources(ps)
    requests = requests_of(adjusted_resources(with_overhead(written, classes), summary))
    if requests == ps.requests:
        return ps
    # Kept as written, so that adjusting again (another LimitRange) starts from them.
    return msgspec.structs.replace(ps, requests=requests, resources=written)


def resource_problem(
    wl: Workload,
    summary: Summary | None,
    classes: Mapping[str, RuntimeClass] = NO_RUNTIME_CLASSES,
) -> str | None:
    """Why `wl` may never be admitted in its namespace (rule 4, and its RuntimeClasses:
    `muster.core.pod_overhead`), or None; the message names each podset container and
    resource, the values and the LimitRange or RuntimeClass."""
    invalid: list[str] = []
    unsatisfied: list[str] = []
    no_overhead: list[str] = []
    for i, ps in enumerate(wl.pod_sets):
        if ps.resources is None and summary is None:
            continue  # one container with requests only: no limit to exceed
        spec = f"spec.podSets[{i}].template.spec"
        written = written_resources(ps)
        if (problem := overhead_problem(written, classes, path=spec)) is not None:
            no_overhead.append(problem)
        pod = adjusted_resources(with_overhead(written, classes), summary)
        if pod.pod is not None:
            invalid += _over_limits(pod.pod, f"{spec}.resources", what="pod ")
            invalid += _below_containers(pod, pod.pod, f"{spec}.resources.requests")
        groups = (("initContainers", pod.init_containers), ("containers", pod.containers))
        for field, containers in groups:
            for c, container in enumerate(containers):
                path = f"{spec}.{field}[{c}]"
                invalid += _over_limits(container, path)
                if summary is not None and summary.container is not None:
                    unsatisfied += _container_bounds(container, summary.container, path)
        if summary is not None and summary.pod is not None:
            unsatisfied += _outside(requests_of(pod), summary.pod, spec, what="pod total ")
    if no_overhead:
        return f"{RUNTIME_CLASS_PROBLEM}: {'; '.join(no_overhead)}"
    if invalid:
        return f"{INVALID_RESOURCES}: {'; '.join(invalid)}"
    if unsatisfied:
        return f"{UNSATISFIED_LIMIT_RANGE}: {'; '.join(unsatisfied)}"
    return None


def _over_limits(c: ContainerResources, path: str, *, what: str = "") -> list[str]:
    over = [r for r in sorted(c.requests) if r in c.limits and c.requests[r] > c.limits[r]]
    return [
        f"{path}: {what}{r} request {_q(r, c.requests[r])} exceeds its limit {_q(r, c.limits[r])}"
        for r in over
    ]


def _below_containers(pod: PodResources, own: ContainerResources, path: str) -> list[str]:
    """The API server's check that pod-level requests cover the containers' total
    (validatePodResourceConsistency), on the pod as it would be stored (LimitRange defaults
    in, limits as missing requests): Kueue does not check it and charges the pod-level
    requests, so its pods would be refused and never start. `own`: `pod`'s pod-level."""
    containers = requests_of(msgspec.structs.replace(pod, pod=None, overhead={}))
    return [
        f"{path}[{r}]: {_q(r, amount)} must be greater than or equal to aggregate container "
        f"requests of {_q(r, containers[r])}"
        for r, amount in sorted(own.requests.items())
        if r in containers and containers[r] > amount
    ]


def _container_bounds(c: ContainerResources, bounds: Bounds, path: str) -> list[str]:
    """Kueue's check: the larger of a container's request and limit against `max`, and the
    smaller against `min` (a resource the container does not ask for is not below it)."""
    keys = c.requests.keys() | c.limits.keys()
    largest = {r: max(c.requests.get(r, 0), c.limits.get(r, 0)) for r in keys}
    smallest = {r: min(v for v in (c.requests.get(r), c.limits.get(r)) if v is not None)
                for r in keys}  # fmt: skip
    return [
        *_outside(largest, bounds, path, what="", check_min=False),
        *_outside(smallest, bounds, path, what="", check_max=False),
    ]


def _outside(
    amounts: Mapping[str, int],
    bounds: Bounds,
    path: str,
    *,
    what: str,
    check_max: bool = True,
    check_min: bool = True,
) -> list[str]:
    found: list[str] = []
    for r in sorted(amounts):
        if check_max and r in bounds.max and amounts[r] > bounds.max[r]:
            found.append(
                f"{path}: {what}{r} {_q(r, amounts[r])} is above the max {_q(r, bounds.max[r])} "
                f"of LimitRange {bounds.max_from[r]}"
            )
        if check_min and r in bounds.min and amounts[r] < bounds.min[r]:
            found.append(
                f"{path}: {what}{r} {_q(r, amounts[r])} is below the min {_q(r, bounds.min[r])} "
                f"of LimitRange {bounds.min_from[r]}"
            )
    return found


def _q(resource: str, milli: int) -> str:
    return format_quantity(milli, binary=is_byte_resource(resource))
