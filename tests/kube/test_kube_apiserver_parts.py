"""The stand-in's pure parts, directly: selector parsing and the three patch formats."""

from __future__ import annotations

from typing import Any

import pytest

from muster.devtools.apiserver.errors import ApiError
from muster.devtools.apiserver.patch import json_patch, merge_patch, strategic_merge_patch
from muster.devtools.apiserver.selectors import parse_field_selector, parse_label_selector


@pytest.mark.parametrize(
    "text", ["a in (b", "a=b=c", "in", "a,,b", "a b", "a>x", "bad key=1", "a=" + "x" * 64]
)
def test_malformed_label_selectors_are_400(text: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_label_selector(text)
    assert caught.value.code == 400


def test_an_empty_value_selects_an_empty_label() -> None:
    selector = parse_label_selector("a=,b!=")
    assert selector.matches({"metadata": {"labels": {"a": "", "b": "x"}}})
    assert not selector.matches({"metadata": {"labels": {"b": "x"}}})


def test_field_selector_values_may_escape_commas_and_equals() -> None:
    selector = parse_field_selector(r"metadata.name=a\,b\=c", frozenset({"metadata.name"}))
    assert selector.matches({"metadata": {"name": "a,b=c"}})


def test_merge_patch_replaces_lists_and_deletes_with_null() -> None:
    target: dict[str, Any] = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge_patch(target, {"a": {"c": [3]}, "d": None}) == {"a": {"b": 1, "c": [3]}}


def test_strategic_merge_patch_directives() -> None:
    target: dict[str, Any] = {
        "metadata": {"finalizers": ["a"]},
        "spec": {
            "containers": [{"name": "x", "image": "1"}, {"name": "y", "image": "1"}],
            "tolerations": [{"key": "old"}],
            "affinity": {"nodeAffinity": {"a": 1}, "podAffinity": {"b": 1}},
        },
    }
    patched = strategic_merge_patch(
        target,
        {
            "metadata": {"finalizers": ["b"]},
            "spec": {
                "containers": [{"name": "y", "$patch": "delete"}, {"name": "z", "image": "2"}],
                "tolerations": [{"key": "new"}],
                "affinity": {"$patch": "replace", "podAffinity": {"c": 1}},
            },
        },
    )
    assert patched["metadata"]["finalizers"] == ["a", "b"]
    assert [c["name"] for c in patched["spec"]["containers"]] == ["x", "z"]
    assert patched["spec"]["tolerations"] == [{"key": "new"}]
    assert patched["spec"]["affinity"] == {"podAffinity": {"c": 1}}
    removed = strategic_merge_patch(
        patched, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}
    )
    assert removed["metadata"] == {"finalizers": ["b"]}


def test_json_patch_moves_copies_and_escapes() -> None:
    doc: dict[str, Any] = {"metadata": {"labels": {"a/b": "1"}}, "list": [1, 2]}
    patched = json_patch(
        doc,
        [
            {"op": "copy", "from": "/metadata/labels/a~1b", "path": "/metadata/labels/c"},
            {"op": "move", "from": "/list/0", "path": "/list/-"},
            {"op": "replace", "path": "/list/0", "value": 9},
        ],
    )
    assert patched == {"metadata": {"labels": {"a/b": "1", "c": "1"}}, "list": [9, 1]}
    with pytest.raises(ApiError) as caught:
        json_patch(doc, [{"op": "remove", "path": "/missing"}])
    assert caught.value.code == 422
