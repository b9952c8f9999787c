"""`written_workload`, the binder's and gang-permit's one-pass reading of a workload manifest,
reads every manifest as `manifest_workload` does, and fails the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muster.api import decode_files
from muster.api.model import Workload
from muster.payloads import PayloadError, manifest_workload, workload_manifest, written_workload

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("k8s/examples", "docs/examples", "tests/scenarios")


def every_example_workload() -> list[Workload]:
    files = sorted(p for d in SOURCES for p in (ROOT / d).rglob("*.yaml"))
    objects, _ = decode_files(files, validation="ignore")  # the valid ones, Jobs' included
    return [o for o in objects if isinstance(o, Workload)]


def test_every_example_workload_reads_back_as_manifest_workload_reads_it() -> None:
    workloads = every_example_workload()
    # Routed, admitted, gang and multi-podset workloads are all among them.
    assert len(workloads) > 300
    assert any(w.alternatives for w in workloads)
    assert any(w.admission is not None for w in workloads)
    for wl in workloads:
        text = workload_manifest(wl)
        assert written_workload(text, what=wl.key) == manifest_workload(text, what=wl.key), wl.key


def test_names_and_uids_default_as_the_api_reads_them() -> None:
    (wl,) = [w for w in every_example_workload() if w.key.startswith("default/")][:1]
    doc = json.loads(workload_manifest(wl))
    del doc["metadata"]["namespace"], doc["metadata"]["uid"]
    text = json.dumps(doc)
    read = written_workload(text, what="w")
    assert read == manifest_workload(text, what="w")
    assert (read.meta.namespace, bool(read.meta.uid)) == ("default", True)


def spec(**fields: object) -> str:
    doc = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", **fields}
    return json.dumps(doc)


POD_SET = {"name": "main", "count": 1, "template": {"spec": {"containers": []}}}


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[]",
        '{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue"}',
        spec(metadata={"namespace": "ml"}),  # no name
        spec(
            metadata={"name": "w", "namespace": "ml"}, spec={"podSets": [{**POD_SET, "count": "x"}]}
        ),
        spec(metadata={"name": "w"}, spec={"podSets": [{**POD_SET, "name": "Not A Label"}]}),
        spec(
            metadata={"name": "w", "annotations": {"muster.dev/alternatives": "[{"}},
            spec={"podSets": [POD_SET]},
        ),
    ],
    ids=["not-json", "a-list", "another-kind", "no-name", "a-wrong-type", "a-bad-name", "routes"],
)
def test_a_manifest_it_cannot_read_fails_as_manifest_workload_fails(text: str) -> None:
    with pytest.raises(PayloadError) as expected:
        manifest_workload(text, what="ml/w")
    with pytest.raises(PayloadError) as got:
        written_workload(text, what="ml/w")
    assert str(got.value) == str(expected.value)
