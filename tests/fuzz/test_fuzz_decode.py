"""Fuzzing the input boundary: YAML/JSON decoding, scenario loading and the gateway's Submit
planning, over mutated Kueue and Kubernetes documents taken from the repository's own examples
and scenarios, plus deep nesting, huge numbers, odd unicode and alias bombs.

The properties: nothing but a clean rejection ever comes out (no traceback of any kind), and
every rejection names an object (or source) and a field (or line). Hangs are caught by the
test's timeout. The normal suite runs a short bounded pass; `make fuzz` runs a long one
(MUSTER_FUZZ_EXAMPLES, default there 5 000 per property).
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostile import alias_bomb, paths_of
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from muster.api import FieldError, decode_documents, decode_yaml, load_json, load_yaml
from muster.api.load import LoadError
from muster.api.model import KueueConfig
from muster.gateway.submit import InvalidManifestError, envelopes, plan_submit
from muster.sim import InvalidScenarioError, load_scenario_text

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("MUSTER_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
pytestmark = pytest.mark.timeout(max(120, EXAMPLES // 5))


@cache
def seeds() -> tuple[dict[str, Any], ...]:
    """Every object document in the repository's examples and scenario files."""
    paths = [
        *sorted((REPO / "tests/scenarios").glob("**/*.yaml")),
        *sorted((REPO / "k8s/examples").glob("*.yaml")),
        *sorted((REPO / "docs/examples").glob("**/*.yaml")),
    ]
    found: list[dict[str, Any]] = []
    for path in paths:
        if path.name.endswith(".expect.yaml"):
            continue
        documents, _ = load_yaml(path.read_text(encoding="utf-8"), source=str(path))
        found += [d for d in documents if isinstance(d, dict) and "kind" in d]
    return tuple(found)


# --- hostile values --------------------------------------------------------------------------

ODD_TEXT = st.sampled_from(
    [
        "", " ", "../x", "lq a", "١٢", "1e30", "-1", "9" * 70, "\u202e", "\x00", "\ufeff",
        "a" * 300, "Ω", "🙂", "\U0010ffff", "NaN", ".inf", "1Ei", "0x10", "yes", "~",
        "kueue.x-k8s.io/queue-name", "a/b/c", "2147483648", "-9223372036854775809",
    ]
)  # fmt: skip
HUGE_NUMBERS = st.sampled_from(
    [2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 10**60, 1e308, -1e308, float("inf"), 0.1, -0.0]
)


def nested(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


HOSTILE = st.one_of(
    st.text(max_size=40),
    ODD_TEXT,
    HUGE_NUMBERS,
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.integers(min_value=1, max_value=150).map(nested),
    st.lists(st.integers(), max_size=25),
    st.dictionaries(ODD_TEXT, st.integers(), max_size=3),
)


# --- mutations of a document tree -------------------------------------------------------------


def mutate(doc: Any, path: tuple[Any, ...], how: str, value: Any) -> Any:
    """A copy of `doc` with the value at `path` replaced, removed, or given an unknown sibling."""
    if not path:
        return value if how == "replace" else doc
    copy = json.loads(json.dumps(doc, default=str))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if how == "replace":
        parent[last] = value
    elif how == "delete":
        del parent[last]
    elif how == "sibling" and isinstance(parent, dict):
        parent[f"{last}x"] = value  # a typo of a real field
    elif how == "duplicate" and isinstance(parent, list):
        parent.append(parent[last])
    return copy


@st.composite
def mutated_documents(draw: st.DrawFn) -> list[Any]:
    docs = [draw(st.sampled_from(seeds())) for _ in range(draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(docs) - 1))
        path = draw(st.sampled_from(paths_of(docs[i])))
        how = draw(st.sampled_from(["replace", "replace", "delete", "sibling", "duplicate"]))
        docs[i] = mutate(docs[i], path, how, draw(HOSTILE))
    return docs


def as_yaml(docs: list[Any]) -> str:
    return yaml.safe_dump_all(docs, allow_unicode=True, sort_keys=False)


INSERTS = ["[", "{", "&a ", "*a ", "<<: ", ": ", "- ", "\t", '"', "\n  ", "!!binary ", "\\ud800"]


@st.composite
def mutated_text(draw: st.DrawFn) -> str:
    """YAML text of seed documents with characters inserted, deleted or flipped."""
    text = as_yaml(draw(mutated_documents()))
    for _ in range(draw(st.integers(0, 5))):
        at = draw(st.integers(0, len(text)))
        insert = draw(st.sampled_from(INSERTS))
        text = text[:at] + insert + text[at + draw(st.integers(0, 3)) :]
    return text


HOSTILE_TEXT = st.one_of(
    mutated_text(),
    st.integers(1, 12).map(alias_bomb),
    st.integers(1, 3000).map(lambda n: "a: " + "[" * n + "]" * n),
    st.integers(1, 300).map(
        lambda n: "".join("  " * i + "k:\n" for i in range(n)) + "  " * n + "v"
    ),
    st.text(max_size=200),
)


# --- the properties ---------------------------------------------------------------------------


def assert_named(errors: list[FieldError]) -> None:
    """Every rejection names an object or source, and a field or line."""
    for error in errors:
        assert isinstance(error, FieldError), error
        assert error.obj, error
        assert error.path, error
        assert error.problem, error
        assert str(error).count(": ") >= 2, error


@FUZZ
@given(text=HOSTILE_TEXT, validation=st.sampled_from(["strict", "warn", "ignore"]))
def test_decode_yaml_never_raises_and_names_every_problem(text: str, validation: Any) -> None:
    warnings: list[FieldError] = []

    objects, errors = decode_yaml(
        text, source="fuzz.yaml", validation=validation, warnings=warnings
    )

    assert_named(errors)
    assert_named(warnings)
    assert objects is not None


@FUZZ
@given(docs=mutated_documents())
def test_mutated_documents_decode_or_are_refused_by_field(docs: list[Any]) -> None:
    objects, errors = decode_yaml(as_yaml(docs), source="fuzz.yaml")

    assert_named(errors)
    for obj in objects:
        assert isinstance(obj, KueueConfig) or obj.meta.name


@FUZZ
@given(docs=mutated_documents())
def test_json_documents_decode_or_are_refused_by_field(docs: list[Any]) -> None:
    text = json.dumps(docs[0], default=str)
    try:
        doc = load_json(text, source="fuzz.json")
    except LoadError as exc:
        assert_named([exc.error])
        return
    _, errors = decode_documents([doc], source="fuzz.json", validation="strict")
    assert_named(errors)


@FUZZ
@given(text=st.one_of(HOSTILE_TEXT, mutated_documents().map(as_yaml)))
def test_scenario_loading_never_raises_anything_else(text: str) -> None:
    try:
        load_scenario_text(text, source="fuzz.yaml")
    except InvalidScenarioError as exc:
        assert_named(list(exc.errors))


@FUZZ
@given(
    text=st.one_of(HOSTILE_TEXT, mutated_documents().map(as_yaml)),
    validation=st.sampled_from(["strict", "warn", "ignore"]),
)
@example(text="0:\nkind:\n 0:\nstatus:", validation="strict")  # a map as kind: was a TypeError
def test_submit_planning_plans_or_refuses_with_one_named_line_per_problem(
    text: str, validation: Any
) -> None:
    try:
        planned = plan_submit(text, cluster="local", submission="fuzz", validation=validation)
    except InvalidManifestError as exc:
        refusal = exc.errors
    else:
        refusal = ()
    for line in refusal:
        assert line.count(": ") >= 2, line
    if refusal:
        return
    for event in planned:
        assert event.key
        assert event.event_id
    for env in envelopes(planned, cluster="local", now_ns=1):
        env.SerializeToString()  # every field fits its protobuf type (no gRPC UNKNOWN)
