"""A namespace's LimitRanges applied to a pod as the API server's LimitRanger admission plugin
applies them when the pod is created (plugin/pkg/admission/limitranger in Kubernetes).

Not Kueue's rules (`muster.core.limit_ranges` has those, for a workload's podsets): these are
what the cluster stores and refuses, so that the pods placement sees request what admission
charged. In order:

1. Pod defaulting, before any admission plugin: a container's limit is its missing request.
2. Mutation: the Container entries' `default` fills each container's (and init container's)
   unset limits, their `defaultRequest` its unset requests. The LimitRanges are merged as
   `summarize` merges them (the first default in name order; Kubernetes applies them one by
   one in its cache's order, which gives the same when their defaults do not overlap).
3. Validation: for each container and init container, then for the pod's totals (containers
   and sidecars against the init peak, no overhead), `min` needs a request at least as large
   (and a limit, when set), `max` needs a limit at most as large (and a request, when set),
   and `maxLimitRequestRatio` a request and a limit whose ratio is at most it. Against the
   strictest bound of all the namespace's LimitRanges, so each problem is said once.

The messages are Kubernetes' own words; the API server refuses such a pod with 403 Forbidden
(`refusal`). Pure: the caller passes the pod's resources and the merged LimitRanges.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from muster.api.encode import is_byte_resource
from muster.api.limit_range import CONTAINER, POD
from muster.api.model import ContainerResources, PodResources
from muster.api.podspec import effective_requests, requests_of
from muster.api.quantity import format_quantity
from muster.core.limit_ranges import Bounds, Summary, adjusted_resources


def defaulted_pod(written: PodResources, summary: Summary | None) -> PodResources:
    """`written` as the API server stores it in a namespace whose LimitRanges are `summary`
    (rules 1 and 2)."""

    def limits_as_requests(c: ContainerResources) -> ContainerResources:
        return msgspec.structs.replace(c, requests=effective_requests(c))

    return adjusted_resources(
        msgspec.structs.replace(
            written,
            containers=tuple(map(limits_as_requests, written.containers)),
            init_containers=tuple(map(limits_as_requests, written.init_containers)),
        ),
        summary,
    )


def pod_problems(pod: PodResources, summary: Summary | None) -> list[str]:
    """Why the LimitRanger refuses `pod` (as `defaulted_pod` left it), one line per problem in
    Kubernetes' words; empty when it admits it (rule 3)."""
    if summary is None:
        return []
    problems: list[str] = []
    if summary.container is not None:
        for c in (*pod.containers, *pod.init_containers):
            problems += _outside(CONTAINER, c.requests, c.limits, summary.container)
    if summary.pod is not None:
        no_overhead = msgspec.structs.replace(pod, overhead={})
        limits = PodResources(
            containers=tuple(_limits_only(c) for c in pod.containers),
            init_containers=tuple(_limits_only(c) for c in pod.init_containers),
        )
        problems += _outside(POD, requests_of(no_overhead), requests_of(limits), summary.pod)
    return problems


def refusal(pod_name: str, problems: list[str]) -> str:
    """The message of the API server's 403 for pod `pod_name` (its generateName when the name
    is still to be made): one problem as it is, several as Kubernetes aggregates them."""
    said = problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"
    return f'pods "{pod_name}" is forbidden: {said}'


def _limits_only(c: ContainerResources) -> ContainerResources:
    """`c`'s limits in the place of its requests, so that `requests_of` sums limits."""
    return ContainerResources(requests=c.limits, sidecar=c.sidecar)


def _outside(
    kind: str, requests: Mapping[str, int], limits: Mapping[str, int], bounds: Bounds
) -> list[str]:
    found: list[str] = []
    for r, low in sorted(bounds.min.items()):
        at = f"minimum {r} usage per {kind} is {_q(r, low)}"
        if r not in requests:
            found.append(f"{at}.  No request is specified")
        elif requests[r] < low:
            found.append(f"{at}, but request is {_q(r, requests[r])}")
        elif r in limits and limits[r] < low:
            found.append(f"{at}, but limit is {_q(r, limits[r])}")
    for r, high in sorted(bounds.max.items()):
        at = f"maximum {r} usage per {kind} is {_q(r, high)}"
        if r not in limits:
            found.append(f"{at}.  No limit is specified")
        elif limits[r] > high:
            found.append(f"{at}, but limit is {_q(r, limits[r])}")
        elif r in requests and requests[r] > high:
            found.append(f"{at}, but request is {_q(r, requests[r])}")
    for r, ratio in sorted(bounds.max_ratio.items()):
        at = f"{r} max limit to request ratio per {kind} is {format_quantity(ratio, binary=False)}"
        if not requests.get(r):
            found.append(f"{at}, but no request is specified or request is 0")
        elif not limits.get(r):
            found.append(f"{at}, but no limit is specified or limit is 0")
        elif limits[r] * 1000 > ratio * requests[r]:
            found.append(f"{at}, but provided ratio is {limits[r] / requests[r]:.6f}")
    return found


def _q(resource: str, milli: int) -> str:
    return format_quantity(milli, binary=is_byte_resource(resource))
