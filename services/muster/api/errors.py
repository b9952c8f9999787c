"""FieldError, the one way muster reports bad input, and the collector decoders fill per object.

Every message names the object ("ClusterQueue/team-a"), the field path as written in YAML
("spec.resourceGroups[0].flavors[1].resources[0].nominalQuota") and what is wrong.
"""

from __future__ import annotations

import msgspec

from muster.api.names import qualified_name_problem
from muster.api.paths import key_path
from muster.api.quantity import QuantityError, negative_problem, parse_quantity

__all__ = ["FieldError", "ObjectErrors", "key_path"]

# A hostile name or key can be thousands of characters; the problem ends the line, and the
# gateway shows 600 characters a line, so the object and the path are shown cut to these.
MAX_OBJ_SHOWN = 120
MAX_PATH_SHOWN = 200


class FieldError(msgspec.Struct, frozen=True):
    """One problem with one field of one object. str() is exactly what the user sees."""

    obj: str  # "ClusterQueue/team-a", "Workload/ml/train-7"
    path: str  # "spec.resourceGroups[0].flavors[1].resources[0].nominalQuota"
    problem: str  # "must be >= 0, got -2"

    def __str__(self) -> str:
        obj, path = _clipped(self.obj, MAX_OBJ_SHOWN), _clipped(self.path, MAX_PATH_SHOWN)
        return f"{obj}: {path}: {self.problem}"


def _clipped(text: str, limit: int) -> str:
    """`text`, or its start and its length when longer than `limit`."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 25]}...({len(text)} characters)"


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
        """Return a resource map parsed to milli-units, recording each bad entry (a resource
        name is a qualified name, as Kubernetes' `ResourceName`: `cpu`, `nvidia.com/gpu`)."""
        parsed: dict[str, int] = {}
        for name, value in values.items():
            problem = qualified_name_problem(name)
            if problem is not None:
                self.add(key_path(path, name), f"resource name: {problem}")
            parsed[name] = self.quantity(value, key_path(path, name))
        return parsed
