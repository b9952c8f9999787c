"""msgspec's structural messages, as msgspec writes them now, reworded: the path as written in
YAML and the problem in plain words (muster.api.wording)."""

from __future__ import annotations

import datetime
import enum
from typing import Annotated, Any

import msgspec
import pytest

from muster.api.wording import Structural, structural


class Phase(enum.Enum):
    RUNNING = "Running"


class Shape(msgspec.Struct, forbid_unknown_fields=True):
    count: int | None = None
    names: list[str] = []
    labels: dict[str, int] = {}
    phase: Phase = Phase.RUNNING
    name: Annotated[str, msgspec.Meta(min_length=1)] = "x"
    weight: float = 1.0
    suspend: bool = False
    priority: Annotated[int, msgspec.Meta(le=2147483647)] = 0
    at: datetime.datetime | None = None
    either: str | int | None = None
    word: Annotated[str, msgspec.Meta(pattern="^[a-z]+$")] = "a"


class Outer(msgspec.Struct):
    spec: Shape
    items: list[Shape] = []


def reworded(doc: dict[str, Any]) -> Structural:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.convert(doc, Outer)
    return structural(str(caught.value))


INT_OR_NULL = "expected an integer or null"
ANY_OF_THREE = "expected an integer, a string or null"


@pytest.mark.parametrize(
    ("doc", "path", "problem"),
    [
        ({"spec": {"count": "2"}}, "spec.count", f"{INT_OR_NULL}, got a string"),
        (
            {"spec": {"count": 1.5}},
            "spec.count",
            f"{INT_OR_NULL}, got a number with a decimal point",
        ),
        ({"spec": {"names": {}}}, "spec.names", "expected a list, got a map"),
        ({"spec": {"names": [1]}}, "spec.names[0]", "expected a string, got an integer"),
        ({"spec": {"labels": []}}, "spec.labels", "expected a map, got a list"),
        ({"spec": {"labels": {"a": "b"}}}, "spec.labels[...]", "expected an integer, got a string"),
        ({"spec": {"phase": "Lost"}}, "spec.phase", "unknown value 'Lost'"),
        ({"spec": {"name": ""}}, "spec.name", "expected a string of length >= 1"),
        ({"spec": {"weight": "x"}}, "spec.weight", "expected a number, got a string"),
        ({"spec": {"suspend": "yes"}}, "spec.suspend", "expected a boolean, got a string"),
        ({"spec": {"priority": 2**31}}, "spec.priority", "expected an integer <= 2147483647"),
        ({"spec": {"at": "noon"}}, "spec.at", "expected an RFC 3339 timestamp"),
        ({"spec": {"either": []}}, "spec.either", f"{ANY_OF_THREE}, got a list"),
        ({"spec": {"word": "A"}}, "spec.word", "expected a string matching '^[a-z]+$'"),
        ({"spec": {"typo": 1}}, "spec.typo", "unknown field"),
        ({}, "spec", "is required"),
        ({"spec": {}, "items": [{"count": "x"}]}, "items[0].count", f"{INT_OR_NULL}, got a string"),
    ],
)
def test_each_problem_is_said_in_plain_words_at_its_yaml_path(
    doc: dict[str, Any], path: str, problem: str
) -> None:
    assert reworded(doc) == Structural(path, problem)


def test_a_map_key_of_the_wrong_type_says_so() -> None:
    assert reworded({"spec": {"labels": {1: 2}}}) == Structural(
        "spec.labels", "map key: expected a string, got an integer"
    )
