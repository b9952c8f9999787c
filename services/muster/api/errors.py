"""FieldError, the one way muster reports bad input, and the collector decoders fill per object.

Every message names the object ("ClusterQueue/team-a"), the field path as written in YAML
("spec.resourceGroups[0].flavors[1].resources[0].nominalQuota") and what is wrong.
"""

from __future__ import annotations

import re

import msgspec

from muster.api.quantity import QuantityError, negative_problem, parse_quantity

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


class FieldError(msgspec.Struct, frozen=True):
    """One problem with one field of one object. str() is exactly what the user sees."""

    obj: str  # "ClusterQueue/team-a", "Workload/ml/train-7"
    path: str  # "spec.resourceGroups[0].flavors[1].resources[0].nominalQuota"
    problem: str  # "must be >= 0, got -2"

    def __str__(self) -> str:
        return f"{self.obj}: {self.path}: {self.problem}"


def key_path(base: str, key: str) -> str:
    """Return the path of map entry `key` under `base`: `requests.cpu`, `requests["a.b/c"]`."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{base}.{key}" if base else key
    return f'{base}["{key}"]'


class ObjectErrors:
    """The FieldErrors found while one object is converted; `obj` names it in each message."""

    def __init__(self, obj: str) -> None:
        self.obj = obj
        self.errors: list[FieldError] = []

    def add(self, path: str, problem: str) -> None:
        self.errors.append(FieldError(self.obj, path, problem))

    def quantity(self, value: object, path: str, *, non_negative: bool = True) -> int:
        """Return `value` parsed as milli-units; on a problem record it and return 0."""
        try:
            if not isinstance(value, str | int | float):
                raise QuantityError(f"expected a quantity, got {type(value).__name__}")
            milli = parse_quantity(value)
        except QuantityError as exc:
            self.add(path, str(exc))
            return 0
        problem = negative_problem(milli) if non_negative else None
        if problem is not None:
            self.add(path, problem)
        return milli

    def quantities(self, values: dict[str, object], path: str) -> dict[str, int]:
        """Return a resource map parsed to milli-units, recording each bad entry."""
        return {name: self.quantity(v, key_path(path, name)) for name, v in values.items()}
