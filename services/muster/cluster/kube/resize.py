"""A pod spec's container requests and limits rewritten so that its pods request exactly what an
admission covers: a Job routed to an alternative (docs/routing.md, "On Kubernetes") runs with
the alternative's requests. Pure.

Kubernetes lets a suspended Job's container resources change (KEP-5440, the
`MutablePodResourcesForSuspendedJobs` gate, beta and on from v1.36), and only those: not the
pod's own `spec.resources`. A pod's requests are derived as Kubernetes derives them and as
admission charged them (`muster.api.podspec.pod_requests`: containers and sidecars, the init
peak, pod-level `spec.resources` in place of that for cpu, memory and hugepages, then the
overhead: the template's own, else its RuntimeClass's `overhead.podFixed`, which the API
server's RuntimeClass admission gives each pod). A rewrite that would not give exactly the
requests wanted is refused (`ResizeError`), never approximated: a Job must not run with
requests its quota does not cover.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import msgspec

from muster.api import quantities_to_strings
from muster.api.errors import ObjectErrors
from muster.api.podspec import pod_level, pod_requests
from muster.api.raw import RawPodSpec

# RuntimeClass name -> its `overhead.podFixed` as the API server stores it (quantities).
RuntimeOverheads = Mapping[str, Mapping[str, Any]]
NO_RUNTIME_CLASSES: RuntimeOverheads = {}

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


def runtime_class_names(obj: Any) -> set[str]:
    """Every `runtimeClassName` in `obj`: the RuntimeClasses its pod templates name, wherever
    they sit (a Job's template, a JobSet's replicatedJobs', a Kueue Workload's podSets')."""
    found: set[str] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            name = item.get("runtimeClassName")
            if isinstance(name, str) and name:
                found.add(name)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


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


def resized(
    spec: Mapping[str, Any],
    want: Mapping[str, int],
    *,
    runtime_classes: RuntimeOverheads = NO_RUNTIME_CLASSES,
) -> dict[str, Any] | None:
    """`spec` with its containers' requests and limits changed so that a pod requests `want`
    (milli-units per resource, overhead included); None when it does already.

    `runtime_classes` holds the overhead of the RuntimeClass `spec` names, when it names one
    and sets no overhead of its own (ResizeError when it is not there: the API server would
    refuse its pods). A resource wanted at 0 is dropped from every container (requests and
    limits). Another is set on the first container, the others keeping theirs; where that
    cannot add up (an init container asks for more), the first container alone carries it.
    A resource the pod sets in its own `spec.resources` is not changed: a suspended Job's
    template may change only its containers' resources. Raises ResizeError when no such
    rewrite gives exactly `want`.
    """
    wanted = {name: amount for name, amount in want.items() if amount}
    counted, overhead = _counted(spec, runtime_classes)
    have = requests_of(counted)
    if have == wanted:
        return None
    if not (spec.get("containers") or []):
        raise ResizeError("the pod template has no containers")
    fixed = _pod_level_names(spec)
    out = counted
    for name in sorted(set(have) | set(wanted)):
        if have.get(name, 0) == wanted.get(name, 0):
            continue
        if name in fixed:
            raise ResizeError(
                f"spec.resources sets {name} for the whole pod, which only a new pod template "
                f"can change (its pods would request {_spelled({name: have.get(name, 0)})} "
                f"instead of {_spelled({name: wanted.get(name, 0)})})"
            )
        out = _set_resource(out, name, wanted.get(name, 0), overhead=overhead.get(name, 0))
    got = requests_of(out)
    if got != wanted:
        why = f" (overhead {_spelled(overhead)} included)" if overhead else ""
        raise ResizeError(
            f"its pods would request {_spelled(got)}{why} instead of {_spelled(wanted)}"
        )
    if "overhead" not in spec:
        out.pop("overhead", None)  # the API server's RuntimeClass admission adds it to pods
    return out


def _counted(
    spec: Mapping[str, Any], runtime_classes: RuntimeOverheads
) -> tuple[dict[str, Any], dict[str, int]]:
    """A copy of `spec` with the overhead its pods get (its own, else its RuntimeClass's),
    and that overhead in milli-units."""
    out = copy.deepcopy(dict(spec))
    name = out.get("runtimeClassName")
    if name and isinstance(name, str) and not out.get("overhead"):
        if name not in runtime_classes:
            raise ResizeError(f'spec.runtimeClassName: RuntimeClass "{name}" not found')
        if runtime_classes[name]:
            out["overhead"] = copy.deepcopy(dict(runtime_classes[name]))
    overhead = out.get("overhead")
    if not overhead:
        return out, {}
    alone = requests_of({"containers": [], "overhead": overhead})
    return out, alone


def _pod_level_names(spec: Mapping[str, Any]) -> frozenset[str]:
    """The resources `spec` sets for the whole pod (`spec.resources`) that replace its
    containers' total."""
    own = spec.get("resources")
    if not isinstance(own, dict):
        return frozenset()
    return frozenset(
        name
        for part in ("requests", "limits")
        if isinstance(own.get(part), dict)
        for name in own[part]
        if pod_level(name)
    )


def _set_resource(spec: dict[str, Any], name: str, amount: int, *, overhead: int) -> dict[str, Any]:
    """`spec` with its containers asking what makes a pod request `amount` of `name`, the
    pod's `overhead` of it included."""
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
    if amount > overhead:
        _put(first, name, amount - overhead)
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
