"""A pod spec's container requests and limits rewritten so that its pods request exactly what an
admission covers: a Job routed to an alternative (docs/routing.md, "On Kubernetes") runs with
the alternative's requests. Pure.

Kubernetes lets a suspended Job's container resources change (KEP-5440, the
`MutablePodResourcesForSuspendedJobs` gate, beta and on from v1.36). A pod's requests are
derived as Kubernetes derives them (`muster.api.podspec.pod_requests`: containers and sidecars,
the init peak, overhead), and a rewrite that would not give exactly the requests wanted is
refused (`ResizeError`), never approximated: a Job must not run with requests its quota does
not cover.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import msgspec

from muster.api import quantities_to_strings
from muster.api.errors import ObjectErrors
from muster.api.podspec import pod_requests
from muster.api.raw import RawPodSpec

# Resources whose limit may exceed the request; any other (extended) resource's limit must
# equal its request, as the API server checks.
_OVERCOMMITTED = frozenset({"cpu", "memory", "ephemeral-storage"})
_CONTAINER_LISTS = ("containers", "initContainers")


class ResizeError(ValueError):
    """The pod spec cannot be made to request exactly what is wanted; str() says why."""


def requests_of(spec: Mapping[str, Any]) -> dict[str, int]:
    """What one pod of `spec` (a PodSpec as JSON) requests, per resource, zero ones left out."""
    try:
        raw = msgspec.convert(dict(spec), RawPodSpec)
    except msgspec.ValidationError as exc:
        raise ResizeError(f"the pod template does not decode: {exc}") from None
    errs = ObjectErrors("")
    found = pod_requests(raw, errs, path="spec")
    if errs.errors:
        raise ResizeError("; ".join(f"{e.path}: {e.problem}" for e in errs.errors))
    return {name: amount for name, amount in found.items() if amount}


def resources_of(spec: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Every container's `resources` as written (None where absent), by container list."""
    return {
        field: [c.get("resources") if isinstance(c, dict) else None for c in spec.get(field) or []]
        for field in _CONTAINER_LISTS
    }


def with_resources(spec: Mapping[str, Any], saved: Mapping[str, Any]) -> dict[str, Any]:
    """`spec` with the containers' `resources` put back as `resources_of` saved them."""
    out = copy.deepcopy(dict(spec))
    for field in _CONTAINER_LISTS:
        kept = saved.get(field)
        containers = out.get(field) or []
        if not isinstance(kept, list) or len(kept) != len(containers):
            continue  # the containers changed since: leave them
        for container, resources in zip(containers, kept, strict=True):
            if resources is None:
                container.pop("resources", None)
            else:
                container["resources"] = copy.deepcopy(resources)
    return out


def resized(spec: Mapping[str, Any], want: Mapping[str, int]) -> dict[str, Any] | None:
    """`spec` with its containers' requests and limits changed so that a pod requests `want`
    (milli-units per resource); None when it does already.

    A resource wanted at 0 is dropped from every container (requests and limits). Another is
    set on the first container, the others keeping theirs; where that cannot add up (an init
    container asks for more), the first container alone carries it. Raises ResizeError when no
    such rewrite gives exactly `want`.
    """
    wanted = {name: amount for name, amount in want.items() if amount}
    have = requests_of(spec)
    if have == wanted:
        return None
    if not (spec.get("containers") or []):
        raise ResizeError("the pod template has no containers")
    out = copy.deepcopy(dict(spec))
    for name in sorted(set(have) | set(wanted)):
        if have.get(name, 0) != wanted.get(name, 0):
            out = _set_resource(out, name, wanted.get(name, 0))
    got = requests_of(out)
    if got != wanted:
        raise ResizeError(f"its pods would request {_spelled(got)} instead of {_spelled(wanted)}")
    return out


def _set_resource(spec: dict[str, Any], name: str, amount: int) -> dict[str, Any]:
    if amount == 0:
        for container in _all_containers(spec):
            _drop(container, name)
        return spec
    # First try: the first container takes what the others leave.
    without_first = copy.deepcopy(spec)
    _drop(without_first["containers"][0], name)
    rest = requests_of(without_first).get(name, 0)
    if amount > rest:
        shared = copy.deepcopy(spec)
        _put(shared["containers"][0], name, amount - rest)
        if requests_of(shared).get(name, 0) == amount:
            return shared
    # Otherwise the first container alone carries it.
    alone = copy.deepcopy(spec)
    first, *others = _all_containers(alone)
    for container in others:
        _drop(container, name)
    _put(first, name, amount)
    return alone


def _all_containers(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for field in _CONTAINER_LISTS for c in spec.get(field) or [] if isinstance(c, dict)]


def _drop(container: dict[str, Any], name: str) -> None:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return
    for part in ("requests", "limits"):
        values = resources.get(part)
        if isinstance(values, dict):
            values.pop(name, None)
            if not values:
                del resources[part]


def _put(container: dict[str, Any], name: str, amount: int) -> None:
    """Request `amount` of `name`; a limit of it stays at least the request (extended
    resources: equal to it)."""
    resources = container.setdefault("resources", {})
    quantity = quantities_to_strings({name: amount})[name]
    resources.setdefault("requests", {})[name] = quantity
    limits = resources.get("limits")
    if isinstance(limits, dict) and name in limits:
        if name not in _OVERCOMMITTED:
            limits[name] = quantity
        else:
            limit = requests_of({"containers": [{"resources": {"limits": {name: limits[name]}}}]})
            if limit.get(name, 0) < amount:
                limits[name] = quantity


def _spelled(requests: Mapping[str, int]) -> str:
    shown = quantities_to_strings(requests)
    return "{" + ", ".join(f"{k}: {v}" for k, v in shown.items()) + "}" if shown else "nothing"
