"""`decode_documents(..., names_checked=True)`: what a cluster stores (gang-permit's view of it)
decodes to the same objects, without checking again the names its API server checked."""

from __future__ import annotations

from pathlib import Path

import yaml

from muster.api import decode_documents
from muster.api.model import Pod

ROOT = Path(__file__).resolve().parents[3]


def every_example_document() -> list[object]:
    files = sorted(
        p for d in ("k8s/examples", "tests/scenarios") for p in (ROOT / d).rglob("*.yaml")
    )
    docs: list[object] = []
    for path in files:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    return docs


def test_every_example_decodes_to_the_same_objects_and_errors() -> None:
    docs = every_example_document()
    checked = decode_documents(docs)
    assert len(checked[0]) > 1000
    assert checked[1]
    assert decode_documents(docs, names_checked=True) == checked


def pod(**meta: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", **meta},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }


def test_a_name_is_the_clusters_to_check_but_a_field_is_still_read() -> None:
    bad_label = pod(labels={"not a key": "v"})
    assert decode_documents([bad_label])[1]
    (read,), errors = decode_documents([bad_label], names_checked=True)
    assert errors == []
    assert isinstance(read, Pod)
    wrong_type = pod(labels={"k": 1})
    (error,) = decode_documents([wrong_type], names_checked=True)[1]
    assert str(error) == "Pod/ns/p: metadata.labels[...]: expected a string, got an integer"
