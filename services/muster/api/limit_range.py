"""v1 LimitRanges: decoded and checked as the API server checks them before storing one.

A Container entry is defaulted as the API server defaults it before storing it (so a
LimitRange written with only a `max` also gives that as the default limit and request, as on a
real cluster), and a LimitRange the API server would refuse is refused here too, naming the
field, so the defaults and bounds `muster.core.limit_ranges` applies are always ones
Kubernetes could hold: min <= defaultRequest <= default <= max for each resource, and a Pod
entry has no defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from muster.api.errors import ObjectErrors, key_path
from muster.api.model import LimitRange, LimitRangeItem, ObjectMeta
from muster.api.names import qualified_name_problem
from muster.api.quantity import format_quantity
from muster.api.raw import RawLimitRange, RawLimitRangeItem

CONTAINER: Final = "Container"
POD: Final = "Pod"
_TYPES: Final = (CONTAINER, POD, "PersistentVolumeClaim")
# Bounds that must hold between an entry's maps, per resource: (lower, upper).
_ORDER: Final = (
    ("min", "max"),
    ("min", "defaultRequest"),
    ("min", "default"),
    ("defaultRequest", "max"),
    ("default", "max"),
    ("defaultRequest", "default"),
)


def limit_range_from_raw(raw: RawLimitRange, meta: ObjectMeta, errs: ObjectErrors) -> LimitRange:
    """The LimitRange `raw`, its problems recorded in `errs` with their field paths."""
    items = tuple(
        _item(item, errs, path=f"spec.limits[{i}]") for i, item in enumerate(raw.spec.limits)
    )
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item.type in seen:
            errs.add(f"spec.limits[{i}].type", f"{item.type} is listed twice")
        seen.add(item.type)
    return LimitRange(meta=meta, limits=items)


def _item(raw: RawLimitRangeItem, errs: ObjectErrors, *, path: str) -> LimitRangeItem:
    # Kubernetes' own types, or another project's with its domain (openshift.io/Image): kept,
    # and bounding nothing here.
    problem = qualified_name_problem(raw.type) if "/" in raw.type else None
    if "/" not in raw.type and raw.type not in _TYPES:
        problem = f"must be one of {', '.join(_TYPES)} or a domain-prefixed name, got {raw.type!r}"
    if problem is not None:
        errs.add(f"{path}.type", problem)
    maps = {
        "max": errs.quantities(raw.max, f"{path}.max"),
        "min": errs.quantities(raw.min, f"{path}.min"),
        "default": errs.quantities(raw.default, f"{path}.default"),
        "defaultRequest": errs.quantities(raw.default_request, f"{path}.defaultRequest"),
        "maxLimitRequestRatio": errs.quantities(
            raw.max_limit_request_ratio, f"{path}.maxLimitRequestRatio"
        ),
    }
    if raw.type == CONTAINER:
        _default_container_item(maps)
    if raw.type == POD:
        for field in ("default", "defaultRequest"):
            if maps[field]:
                errs.add(f"{path}.{field}", "must not be set for type Pod (it has no defaults)")
    for lower, upper in _ORDER:
        _check_order(maps[lower], maps[upper], errs, path=path, lower=lower, upper=upper)
    for name, ratio in maps["maxLimitRequestRatio"].items():
        if ratio < 1000:
            errs.add(key_path(f"{path}.maxLimitRequestRatio", name), "must be at least 1")
    return LimitRangeItem(
        type=raw.type,
        max=maps["max"],
        min=maps["min"],
        default=maps["default"],
        default_request=maps["defaultRequest"],
        max_limit_request_ratio=maps["maxLimitRequestRatio"],
    )


def _default_container_item(maps: dict[str, dict[str, int]]) -> None:
    """The API server's defaulting of a Container entry (SetDefaults_LimitRangeItem), so a
    LimitRange reads as the cluster stores it: an unset `default` is the `max`, then an unset
    `defaultRequest` is the `default`, else the `min`."""
    maps["default"] = {**maps["max"], **maps["default"]}
    maps["defaultRequest"] = {**maps["min"], **maps["default"], **maps["defaultRequest"]}


def _check_order(
    low: Mapping[str, int],
    high: Mapping[str, int],
    errs: ObjectErrors,
    *,
    path: str,
    lower: str,
    upper: str,
) -> None:
    for name in sorted(low.keys() & high.keys()):
        if low[name] > high[name]:
            errs.add(
                key_path(f"{path}.{lower}", name),
                f"{format_quantity(low[name])} must be at most {upper} "
                f"{format_quantity(high[name])}",
            )
