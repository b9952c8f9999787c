"""LimitRanges as the real server treats them: stored with their Container defaults, and applied
to every new pod by the LimitRanger admission plugin (plugin/pkg/admission/limitranger).

- A LimitRange's Container entry is defaulted when stored: an unset `default` is the `max`, then
  an unset `defaultRequest` the `default`, else the `min` (SetDefaults_LimitRangeItem).
- Then it is validated as ValidateLimitRange does: one entry per type, no defaults on a Pod entry,
  and per resource min <= defaultRequest <= default <= max, 1 <= maxLimitRequestRatio <= max/min;
  each problem is a field error of the 422 Invalid answer.
- A pod's container (and init container) limit is its missing request (pod defaulting, before
  any admission plugin).
- On pod create, each LimitRange of the namespace in turn (by name) fills what each container
  leaves unset: limits from its Container `default`, requests from its `defaultRequest`, and
  says so in the `kubernetes.io/limit-ranger` annotation.
- Then each LimitRange in turn bounds the pod: `min`, `max` and `maxLimitRequestRatio` of its
  Container entry for every container and init container, of its Pod entry for the pod's totals
  (containers and sidecars against the init peak); the first LimitRange with a problem refuses
  the pod with 403 Forbidden, every problem of that LimitRange in Kubernetes' words.
Pod updates are not checked (a pod's containers cannot change), as in Kubernetes.

The stand-in stands alone (it imports nothing of muster's), so it reads quantities itself:
exactly, as decimals; messages print them as the object spells them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from muster.devtools.apiserver.errors import (
    Cause,
    bad_value,
    duplicate,
    forbidden,
    forbidden_request,
    required,
)
from muster.devtools.apiserver.objects import JsonObj, meta, name_of
from muster.devtools.apiserver.strategy_base import Strategy

ANNOTATION: Final = "kubernetes.io/limit-ranger"
_SUFFIXES: Final = {
    **{s: Decimal(2) ** (10 * (i + 1)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Decimal(10) ** (3 * i) for i, s in enumerate(("", "k", "M", "G", "T", "P", "E"))},
    "m": Decimal("0.001"),
    "u": Decimal("0.000001"),
    "n": Decimal("0.000000001"),
}
_QUANTITY: Final = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE]?)")
_Amounts = dict[str, tuple[Decimal, str]]  # resource -> (value, as written)
_DEFAULTS: Final = ("default", "defaultRequest")


class LimitRangeStrategy(Strategy):
    def defaults(self, obj: JsonObj) -> None:
        spec = obj.get("spec")
        for item in (spec.get("limits") if isinstance(spec, dict) else None) or []:
            if not isinstance(item, dict) or item.get("type") != "Container":
                continue
            default = {**(item.get("max") or {}), **(item.get("default") or {})}
            request = {**(item.get("min") or {}), **default, **(item.get("defaultRequest") or {})}
            for field, filled in (("default", default), ("defaultRequest", request)):
                if filled:
                    item[field] = filled

    def causes(self, obj: JsonObj) -> list[Cause]:
        spec = obj.get("spec")
        limits = spec.get("limits") if isinstance(spec, dict) else None
        causes: list[Cause] = []
        seen: set[object] = set()
        for i, item in enumerate(limits if isinstance(limits, list) else []):
            if not isinstance(item, dict):
                continue
            at = f"spec.limits[{i}]"
            kind = item.get("type")
            if kind in seen:
                causes.append(duplicate(f"{at}.type", kind))
            seen.add(kind)
            causes += _item_causes(at, item)
        return causes


def _item_causes(at: str, item: JsonObj) -> list[Cause]:
    """One entry's own consistency, in ValidateLimitRange's order for each resource."""
    causes: list[Cause] = []
    kind = item.get("type")
    if kind == "Pod":
        why = "may not be specified when `type` is 'Pod'"
        causes += [forbidden(f"{at}.{field}", why) for field in _DEFAULTS if item.get(field)]
    if kind == "PersistentVolumeClaim" and not any(
        "storage" in (item.get(f) or {}) for f in ("min", "max")
    ):
        why = "either minimum or maximum storage value is required, but neither was provided"
        causes.append(required(f"{at}.limits", why))
    low, high, ratio = (amounts(item.get(f)) for f in ("min", "max", "maxLimitRequestRatio"))
    default, request = ({}, {}) if kind == "Pod" else (amounts(item.get(f)) for f in _DEFAULTS)
    # (field, the larger and its name, the smaller and its name, the value shown): the larger
    # must not exceed the smaller; Kubernetes shows the max, not the default, when the default
    # is above it.
    orders = (
        ("min", low, "min", high, "max", low),
        ("defaultRequest", low, "min", request, "default request", request),
        ("defaultRequest", request, "default request", high, "max", request),
        ("defaultRequest", request, "default request", default, "default limit", request),
        ("default", low, "min", default, "default", low),
        ("default", default, "default", high, "max", high),
    )
    for r in sorted({*low, *high, *default, *request, *ratio}):
        for field, larger, big, smaller, small, shown in orders:
            if r in larger and r in smaller and larger[r][0] > smaller[r][0]:
                said = f"{big} value {larger[r][1]} is greater than {small} value {smaller[r][1]}"
                causes.append(bad_value(f"{at}.{field}[{r}]", shown[r][1], said))
        if r not in ratio:
            continue
        field, (value, spelled) = f"{at}.maxLimitRequestRatio[{r}]", ratio[r]
        if value < 1:
            causes.append(bad_value(field, spelled, f"ratio {spelled} is less than 1"))
        if r in low and r in high and low[r][0] > 0 and value > high[r][0] / low[r][0]:
            said = f"ratio {spelled} is greater than max/min = {high[r][0] / low[r][0]:.6f}"
            causes.append(bad_value(field, spelled, said))
    return causes


def default_requests(spec: JsonObj) -> None:
    """Pod defaulting: each container's limit is its request where it sets none."""
    for container in _containers(spec):
        resources = container.get("resources")
        limits = resources.get("limits") if isinstance(resources, dict) else None
        if isinstance(resources, dict) and isinstance(limits, dict) and limits:
            resources["requests"] = {**limits, **(resources.get("requests") or {})}


def admit_pod(pod: JsonObj, limit_ranges: Iterable[JsonObj]) -> None:
    """Apply the LimitRanges of `pod`'s namespace to it (mutation, then validation); raises
    ApiError 403 when one refuses it."""
    ranges = sorted(limit_ranges, key=name_of)
    spec = pod.get("spec")
    if not ranges or not isinstance(spec, dict):
        return
    for lr in ranges:
        _mutate(pod, spec, _items(lr, "Container"))
    for lr in ranges:
        problems = _problems(spec, lr)
        if problems:
            said = problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"
            # Admission runs before a name is made from generateName, so that is the one said.
            name = meta(pod).get("generateName") or name_of(pod)
            raise forbidden_request(
                f'pods "{name}" is forbidden: {said}', details={"name": name, "kind": "pods"}
            )


def _mutate(pod: JsonObj, spec: JsonObj, items: list[JsonObj]) -> None:
    limits = {k: v for item in items for k, v in (item.get("default") or {}).items()}
    requests = {k: v for item in items for k, v in (item.get("defaultRequest") or {}).items()}
    said: list[str] = []
    for field, what in (("containers", "container"), ("initContainers", "init container")):
        for container in spec.get(field) or []:
            if not isinstance(container, dict):
                continue
            resources = container.setdefault("resources", {})
            for part, defaults in (("requests", requests), ("limits", limits)):
                have = resources.get(part) or {}
                added = sorted(set(defaults) - set(have))
                if added:
                    resources[part] = {**have, **{k: defaults[k] for k in added}}
                    said.append(
                        f"{', '.join(added)} {part[:-1]} for {what} {container.get('name')}"
                    )
    if said:
        annotations = meta(pod).setdefault("annotations", {})
        annotations[ANNOTATION] = "LimitRanger plugin set: " + "; ".join(said)


def _problems(spec: JsonObj, lr: JsonObj) -> list[str]:
    problems: list[str] = []
    for item in _items(lr, "Container"):
        for container in _containers(spec):
            resources = container.get("resources") or {}
            requests = amounts(resources.get("requests"))
            problems += _outside("Container", item, requests, amounts(resources.get("limits")))
    for item in _items(lr, "Pod"):
        problems += _outside("Pod", item, pod_total(spec, "requests"), pod_total(spec, "limits"))
    return problems


def _outside(kind: str, item: JsonObj, requests: _Amounts, limits: _Amounts) -> list[str]:
    """One LimitRange entry's bounds on one container's (or the pod's) requests and limits."""
    found: list[str] = []
    for r, (low, spelled) in sorted(amounts(item.get("min")).items()):
        at = f"minimum {r} usage per {kind} is {spelled}"
        if r not in requests:
            found.append(f"{at}.  No request is specified")
        elif requests[r][0] < low:
            found.append(f"{at}, but request is {requests[r][1]}")
        elif r in limits and limits[r][0] < low:
            found.append(f"{at}, but limit is {limits[r][1]}")
    for r, (high, spelled) in sorted(amounts(item.get("max")).items()):
        at = f"maximum {r} usage per {kind} is {spelled}"
        if r not in limits:
            found.append(f"{at}.  No limit is specified")
        elif limits[r][0] > high:
            found.append(f"{at}, but limit is {limits[r][1]}")
        elif r in requests and requests[r][0] > high:
            found.append(f"{at}, but request is {requests[r][1]}")
    for r, (ratio, spelled) in sorted(amounts(item.get("maxLimitRequestRatio")).items()):
        at = f"{r} max limit to request ratio per {kind} is {spelled}"
        request, limit = requests.get(r, (Decimal(0), ""))[0], limits.get(r, (Decimal(0), ""))[0]
        if not request:
            found.append(f"{at}, but no request is specified or request is 0")
        elif not limit:
            found.append(f"{at}, but no limit is specified or limit is 0")
        elif limit > request * ratio:
            found.append(f"{at}, but provided ratio is {limit / request:.6f}")
    return found


def pod_total(spec: JsonObj, part: str) -> _Amounts:
    """The pod's `part` (requests or limits) as Kubernetes totals it: containers and sidecars,
    or the largest init container with the sidecars started before it, whichever is more."""
    total: dict[str, Decimal] = {}
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        _add(total, _own(container, part))
    for container in spec.get("initContainers") or []:
        own = _own(container, part)
        if isinstance(container, dict) and container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            running = dict(sidecars)
        else:
            running = dict(sidecars)
            _add(running, own)
        for r, v in running.items():
            init_peak[r] = max(v, init_peak.get(r, v))
    for r, v in init_peak.items():
        total[r] = max(v, total.get(r, v))
    return {r: (v, _spelled(v)) for r, v in total.items()}


def _own(container: Any, part: str) -> dict[str, Decimal]:
    resources = container.get("resources") if isinstance(container, dict) else None
    found = amounts(resources.get(part) if isinstance(resources, dict) else None)
    return {r: v for r, (v, _) in found.items()}


def _add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for r, v in more.items():
        into[r] = into.get(r, Decimal(0)) + v


def _spelled(value: Decimal) -> str:
    """A total's spelling: whole units, else milli-units ("1500m")."""
    whole = value.to_integral_value()
    return str(whole) if whole == value else f"{(value * 1000).to_integral_value()}m"


def _items(lr: JsonObj, kind: str) -> list[JsonObj]:
    spec = lr.get("spec")
    limits = spec.get("limits") if isinstance(spec, dict) else None
    return [i for i in limits or [] if isinstance(i, dict) and i.get("type") == kind]


def _containers(spec: JsonObj) -> list[JsonObj]:
    return [
        c
        for field in ("containers", "initContainers")
        for c in spec.get(field) or []
        if isinstance(c, dict)
    ]


def amounts(written: Any) -> _Amounts:
    """The quantities of a resource list that parse, with their spelling (one that does not
    parse is the API server's validation's to refuse, not this plugin's)."""
    found: _Amounts = {}
    for r, text in (written or {}).items() if isinstance(written, dict) else ():
        value = _quantity(str(text))
        if value is not None:
            found[r] = (value, str(text))
    return found


def _quantity(text: str) -> Decimal | None:
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    number, suffix = match.groups()
    try:
        if suffix[:1] in ("e", "E") and len(suffix) > 1:
            return Decimal(number) * Decimal(10) ** int(suffix[1:])
        return Decimal(number) * _SUFFIXES[suffix]
    except InvalidOperation:
        return None
