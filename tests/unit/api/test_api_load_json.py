"""muster.api.load: a manifest that is one JSON object is read as JSON, to exactly the values
(and, where the two could differ, the problems) the YAML reader gives for the same text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.api import FieldError, load_yaml
from muster.api.load import _NOT_JSON, MAX_DEPTH, _json_as_yaml, _read_yaml
from muster.gateway.submit import plan_submit

# Spellings YAML 1.1 reads otherwise than JSON does, or that only one of them takes.
KEYS = st.text(alphabet=st.characters(codec="ascii"), max_size=12)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**70), max_value=10**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(codec="ascii"), max_size=16)
    | st.sampled_from(["yes", "no", "on", "~", "2001-12-14", "0x1F", "1_000", "<<", "1e3", ".5"])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, nan included, and of the same types (1 is not 1.0 nor True)."""
    return repr(a) == repr(b)


@settings(max_examples=400, deadline=None)
@given(
    document=st.dictionaries(KEYS, VALUES, max_size=6),
    indent=st.sampled_from([None, 0, 2]),
    separators=st.sampled_from([None, (",", ":")]),
    numbers=st.sampled_from(["", "1e3", "-1.5E+2", "NaN", "-Infinity", "0.0", "-0"]),
)
def test_a_json_object_loads_as_yaml_reads_the_same_text(
    document: dict[str, Any], indent: int | None, separators: Any, numbers: str
) -> None:
    text = json.dumps(document, indent=indent, separators=separators, allow_nan=True)
    if numbers:  # a number spelled as JSON writers may, which YAML 1.1 may read as a string
        text = text[:-1] + (", " if document else "") + f'"n": {numbers}' + "}"
    yaml_dups: list[FieldError] = []
    fast_dups: list[FieldError] = []

    expected = _read_yaml(text, source="m", duplicates=yaml_dups)
    got = load_yaml(text, source="m", duplicates=fast_dups)

    assert _same(got, expected)
    assert fast_dups == yaml_dups


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',  # a duplicate key: YAML tells it, with its line
        '{"%s": 1}' % ("k" * 1100),  # a key YAML does not take as one
        '{"a": 1} # a comment',
        '{"a": "\\u00e9\\n"}',  # escapes
        '{"a": "tab\there"}',
        '{"a": "del\x7f"}',  # a character YAML refuses
        '{"a": 1' + "0" * 70 + "}",  # too many digits
        '{"a": 1}\n---\n{"b": 2}',  # more than one document
        "{a: 1}",  # YAML's flow map, not JSON
        "[" * 3 + "]" * 3,  # not an object
        '{"a": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}",  # one level too deep
    ],
)
def test_text_where_json_and_yaml_could_differ_is_read_as_yaml(text: str) -> None:
    yaml_dups: list[FieldError] = []
    dups: list[FieldError] = []

    assert load_yaml(text, source="m", duplicates=dups) == _read_yaml(
        text, source="m", duplicates=yaml_dups
    )
    assert dups == yaml_dups


def test_kubectl_shaped_json_takes_the_json_path() -> None:
    manifest = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"namespace": "team", "name": "w", "annotations": {"a": "1"}},
        "spec": {
            "queueName": "lq",
            "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": []}}}],
        },
    }
    for text in (json.dumps(manifest), json.dumps(manifest, indent=2) + "\n"):
        assert _json_as_yaml(text) == manifest
    nested = '{"a": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"  # at the limit
    assert _json_as_yaml(nested) is not _NOT_JSON


def test_a_submit_as_json_plans_the_events_of_the_same_submit_as_yaml() -> None:
    yaml_text = (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\n"
        "metadata: {namespace: team, name: w, annotations: {muster.dev/run-seconds: '60'}}\n"
        "spec:\n  queueName: lq\n  podSets:\n  - name: main\n    count: 1\n    template:\n"
        "      spec:\n        containers: [{name: c, resources: {requests: {cpu: 100m}}}]\n"
    )
    json_text = json.dumps(load_yaml(yaml_text)[0][0])

    from_yaml = plan_submit(yaml_text, cluster="local", submission="retry-1")
    from_json = plan_submit(json_text, cluster="local", submission="retry-1")

    assert [p.event_id for p in from_json] == [p.event_id for p in from_yaml]
    assert [p.payload for p in from_json] == [p.payload for p in from_yaml]
