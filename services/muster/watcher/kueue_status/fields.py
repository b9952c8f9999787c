"""Pieces of Kueue's status fields: quantities, a condition, a flavor list."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.api.encode import is_byte_resource
from muster.api.quantity import QuantityError, format_quantity, parse_quantity
from muster.core.conditions import (
    condition_message,
)

FlavorResource = tuple[str, str]  # (flavor, resource)


def milli_of(text: str) -> int:
    try:
        return int(parse_quantity(text))
    except QuantityError:
        return 0  # admission writes quantities it parsed itself; never seen


def quantity_of(resource: str, milli: int) -> str:
    return format_quantity(milli, binary=is_byte_resource(resource))


def kueue_condition(type_: str, status: bool, reason: str, message: str) -> dict[str, str]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": condition_message(message),
    }


def flavor_list(sums: Mapping[FlavorResource, int]) -> list[dict[str, Any]]:
    """Kueue's `[{name: flavor, resources: [{name, total}]}]`, sorted by flavor and resource."""
    flavors: dict[str, list[dict[str, Any]]] = {}
    for (flavor, resource), milli in sorted(sums.items()):
        entry = {"name": resource, "total": quantity_of(resource, milli)}
        flavors.setdefault(flavor, []).append(entry)
    return [{"name": name, "resources": resources} for name, resources in flavors.items()]
