"""A Kueue Workload's manifest read in one typed pass (`decode_workload_json`, what admission
reads of every `submitted`): the same Workload as the reading through a dict, every check run;
anything that pass cannot vouch for is read through the dict, so it fails with the same words.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hostile import paths_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from muster import payloads
from muster.admission.fact_reader import fact_of
from muster.admission.facts import Submit
from muster.api import decode_documents, decode_files
from muster.api.model import ApiObject, Workload
from muster.contracts.v1 import events_pb2 as pb
from muster.payloads import PayloadError, PodSetsByTemplate, decode_manifest, workload_manifest

ROOT = Path(__file__).resolve().parents[3]


@cache
def example_manifests() -> tuple[str, ...]:
    """Every example and scenario Workload (Jobs' and JobSets' included), as written."""
    dirs = ("k8s/examples", "docs/examples", "tests/scenarios")
    files = sorted(p for d in dirs for p in (ROOT / d).rglob("*.yaml"))
    objects, _ = decode_files(files, validation="ignore")
    return tuple(workload_manifest(o) for o in objects if isinstance(o, Workload))


def read(text: str, *, typed: bool) -> ApiObject | str:
    """`decode_manifest(text)`, or its error's words; `typed` False: as before the typed pass
    (through a dict alone). Each reading starts with no template kept."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(payloads, "_POD_SETS", PodSetsByTemplate())
        if not typed:
            patch.setattr(payloads, "decode_workload_json", lambda *_, **__: None)
        try:
            return decode_manifest(text, what="ml/w")
        except PayloadError as err:
            return str(err)


def test_every_example_workload_reads_as_through_a_dict() -> None:
    manifests = example_manifests()
    assert len(manifests) > 300  # routed, admitted, gang and multi-podset ones among them
    for text in manifests:
        typed = read(text, typed=True)
        assert isinstance(typed, Workload), typed
        assert typed == read(text, typed=False)


@pytest.fixture
def dict_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The manifests read through a dict (`decode_documents`), in order."""
    reads: list[str] = []

    def counted(docs: Any, **options: Any) -> Any:
        reads.append(options["source"])
        return decode_documents(docs, **options)

    monkeypatch.setattr("muster.payloads.decode_documents", counted)
    return reads


def submitted(text: str, key: str) -> pb.Envelope:
    env = pb.Envelope(workload=key, cluster="c", event_id="e", time_unix_nano=10**9)
    env.submitted.manifest_json = text
    return env


def test_admission_reads_a_submitted_the_gateway_wrote_in_one_pass(dict_reads: list[str]) -> None:
    first = json.loads(example_manifests()[0])
    key = f"{first['metadata']['namespace']}/{first['metadata']['name']}"
    fact = fact_of(submitted(example_manifests()[0], key))
    assert isinstance(fact, Submit)
    assert fact.workload.key == key
    assert dict_reads == []
    # One with a problem is read through the dict, which names it.
    first["metadata"]["labels"] = {"Bad Key!": "v"}
    with pytest.raises(ValueError, match=r"metadata\.labels"):
        fact_of(submitted(json.dumps(first), key))
    assert dict_reads == [f"submitted {key}"]


WORKLOAD: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"namespace": "ml", "name": "w", "annotations": {"muster.dev/run-seconds": "9"}},
    "spec": {
        "queueName": "q",
        "podSets": [
            {
                "name": "main",
                "count": 2,
                "template": {
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
                },
            }
        ],
    },
}
TEXT = json.dumps(WORKLOAD)
LONG_INT = "9" * 5000  # past Python's limit on an int's digits: json.loads refuses it


def edited(**meta: Any) -> str:
    return json.dumps({**WORKLOAD, "metadata": {**WORKLOAD["metadata"], **meta}})


@pytest.mark.parametrize(
    "text",
    [
        edited(name="W"),  # not a DNS subdomain
        edited(name="w" * 64),  # a Workload's name is a label value
        edited(namespace="Ml"),
        edited(labels={"app": "x" * 70}),
        edited(annotations={"bad key": "v"}),
        edited(generateName="w-", name=""),  # named from generateName: through the dict
        TEXT.replace('"cpu": "1"', '"cpu": "x"'),
        TEXT.replace('"count": 2', '"count": -1'),
        TEXT.replace('"count": 2', '"count": 2147483648'),
        TEXT.replace('"queueName": "q"', '"queueName": "Q!"'),
        TEXT.replace('"cpu": "1"', '"cpu": NaN'),  # the json module reads it, msgspec does not
        TEXT.replace('"cpu": "1"', '"cpu": 1e400'),  # inf there, out of range here
        TEXT.replace('"name": "c"', '"name": "\\ud800"'),  # a lone surrogate
        TEXT.replace('"queueName"', f'"unknownField": {LONG_INT}, "queueName"'),
        TEXT.replace('"queueName"', f'"unknownField": "{LONG_INT}", "queueName"'),
        TEXT.replace('"queueName"', '"unknownField": ' + "[" * 3000 + "]" * 3000 + ', "queueName"'),
        TEXT.replace('"name": "w"', '"name": "w", "name": "W"'),  # the last one counts
        TEXT.replace('"name": "w"', '"name": "W", "name": "w"'),
        TEXT.replace("v1beta2", "v1beta1"),
        TEXT.replace('"Workload"', '"LocalQueue"'),
        TEXT.replace('"name": "w"', '"name": "w\\u002dx"'),  # an escape: the same name
        json.dumps(WORKLOAD, indent=2, sort_keys=True),
        TEXT.replace("{", "{ ", 1) + "  ",
        TEXT[:-1],
        "[]",
        "",
    ],
)
def test_a_hostile_manifest_reads_or_fails_as_through_a_dict(text: str) -> None:
    assert read(text, typed=True) == read(text, typed=False)


def test_a_long_int_in_an_unread_field_is_refused_as_through_a_dict() -> None:
    # msgspec skips the field unread; the json module refuses the number, and so does admission.
    text = TEXT.replace('"queueName"', f'"unknownField": {LONG_INT}, "queueName"')
    assert "not JSON" in str(read(text, typed=True))


# Values anywhere in a manifest: wrong types, out of range, odd strings, names the API refuses.
HOSTILE = st.one_of(
    st.sampled_from(
        [
            "",
            "W",
            "a/b",
            "x" * 70,
            "\u202e",
            "100m",
            "-1",
            "1e3",
            2**31,
            -(2**63) - 1,
            10**30,
            1.5,
            -0.0,
            True,
            None,
            [],
            {},
            {"Bad Key!": "v"},
            {"a": 1},
            ["x"],
        ]
    ),
    st.text(max_size=8),
    st.integers(),
)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """An example Workload's manifest with a few values replaced, removed or added beside."""
    doc = json.loads(draw(st.sampled_from(example_manifests())))
    for _ in range(draw(st.integers(1, 3))):
        *parents, last = draw(st.sampled_from(paths_of(doc)[1:]))  # not the root
        node = doc
        for step in parents:
            node = node[step]
        how = draw(st.sampled_from(["replace", "replace", "delete", "beside"]))
        if how == "replace":
            node[last] = draw(HOSTILE)
        elif how == "delete" and isinstance(node, dict):
            del node[last]
        elif isinstance(node, dict):
            node[f"{last}X"] = draw(HOSTILE)
    return json.dumps(doc, sort_keys=draw(st.booleans()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated())
def test_a_mutated_manifest_reads_or_fails_as_through_a_dict(text: str) -> None:
    assert read(text, typed=True) == read(text, typed=False)
