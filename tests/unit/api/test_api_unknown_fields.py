"""Strict validation's walk over a document: every unknown field, in document order, at any
depth of nested lists (the walk keeps its own stack, so no depth is too deep for it)."""

from __future__ import annotations

from typing import Any

import pytest

from muster.api import decode_documents
from muster.api.schema import SCHEMAS, unknown_fields

WORKLOAD_FIELDS = SCHEMAS[("kueue.x-k8s.io/v1beta2", "Workload")]
# What `workload()` has that a Workload has not, in document order.
UNKNOWN = [
    "metadata.colour",
    "spec.speed",
    "spec.podSets[0].size",
    "spec.podSets[0].template.spec.containers[0].gpu",
    "spec.podSets[0].template.spec.containers[1].tpu",
    "spec.podSets[1].weight",
]


def workload(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns", "colour": "red"},
        "spec": {
            "queueName": "lq",
            "podSets": [
                {"name": "a", "count": 1, "size": 3, "template": {"spec": {"containers": [
                    {"name": "c", "image": "i", "gpu": 1},
                    {"name": "d", "image": "i", "tpu": {"v": 5}},
                ]}}},
                {"name": "b", "count": 1, "weight": 2, "template": {"spec": {"containers": []}}},
            ],
            "speed": "fast",
        },
    }  # fmt: skip
    doc.update(extra)
    return doc


def test_every_unknown_field_is_named_in_document_order() -> None:
    # A map's own unknown fields come before those of what it holds, lists item by item.
    assert list(unknown_fields(workload(extra=1), WORKLOAD_FIELDS)) == ["extra", *UNKNOWN]


def test_a_known_document_has_none() -> None:
    doc = workload()
    del doc["metadata"]["colour"], doc["spec"]["speed"], doc["spec"]["podSets"][1]["weight"]
    del doc["spec"]["podSets"][0]["size"]
    doc["spec"]["podSets"][0]["template"]["spec"]["containers"] = [{"name": "c", "image": "i"}]
    assert list(unknown_fields(doc, WORKLOAD_FIELDS)) == []


@pytest.mark.parametrize("depth", [1, 3, 5_000])
def test_lists_nested_at_any_depth_are_walked(depth: int) -> None:
    # Far deeper than Python's recursion limit: a walk that recursed would fail here.
    containers: Any = [{"name": "c", "deep": True}]
    for _ in range(depth - 1):
        containers = [containers]
    doc = workload()
    doc["spec"]["podSets"][0]["template"]["spec"]["containers"] = containers
    path = "spec.podSets[0].template.spec.containers" + "[0]" * depth + ".deep"
    assert path in list(unknown_fields(doc, WORKLOAD_FIELDS))


def test_strict_decoding_refuses_them_one_line_each() -> None:
    objects, errors = decode_documents([workload()], validation="strict")
    assert objects == []
    assert [e.path for e in errors if e.problem == "unknown field"] == UNKNOWN
