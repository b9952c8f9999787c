"""Document handling: streams, lists, files, syntax errors, unknown and skipped kinds."""

from __future__ import annotations

import json
from pathlib import Path

from muster.api import decode_documents, decode_files, decode_yaml
from muster.api.decode import Kept
from muster.api.model import ClusterQueue, LocalQueue, ResourceFlavor

GOOD_AND_BAD = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: broken}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: {}}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: ml}
spec: {clusterQueue: broken}
"""


def test_one_bad_document_does_not_stop_the_others() -> None:
    objects, errors = decode_yaml(GOOD_AND_BAD, source="cluster.yaml")
    assert [type(o) for o in objects] == [ResourceFlavor, LocalQueue]
    assert [str(e) for e in errors] == [
        "ClusterQueue/broken: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota:"
        " expected a quantity, got dict"
    ]


def test_yaml_syntax_error_names_file_and_line_and_keeps_earlier_documents() -> None:
    text = (
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: [unclosed\n"
    )
    objects, errors = decode_yaml(text, source="bad.yaml")
    assert len(objects) == 1
    (error,) = errors
    assert (error.obj, error.path) == ("bad.yaml", "line 8")
    assert error.problem.startswith("invalid YAML: ")


def test_unknown_kind_is_one_error() -> None:
    objects, errors = decode_yaml(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: prod}\n"
    )
    assert objects == []
    assert [str(e) for e in errors] == [
        "Deployment/web: apiVersion: kind Deployment in apps/v1 is not supported"
    ]


def test_unsupported_version_of_known_kind_is_an_error() -> None:
    _, errors = decode_yaml(
        "apiVersion: kueue.x-k8s.io/v1alpha1\nkind: ClusterQueue\nmetadata: {name: a}\n"
    )
    assert [str(e) for e in errors] == [
        "ClusterQueue/a: apiVersion: kind ClusterQueue in kueue.x-k8s.io/v1alpha1 is not supported"
    ]


def test_topologies_are_skipped_not_errors() -> None:
    skipped: list[str] = []
    objects, errors = decode_yaml(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {name: dc}\n---\n"
        "apiVersion: kueue.x-k8s.io/v1alpha1\nkind: Topology\nmetadata: {name: old}\n",
        skipped=skipped,
    )
    assert (objects, errors) == ([], [])
    assert skipped == [
        "Topology/dc: not used until topology-aware scheduling",
        "Topology/old: not used until topology-aware scheduling",
    ]


def test_kept_kinds_come_back_as_written_in_yaml_and_json_files(tmp_path: Path) -> None:
    config = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ProvisioningRequestConfig\n"
    config += "metadata: {name: gpu}\nspec: {provisioningClassName: queued}\n"
    (tmp_path / "a.yaml").write_text(config + "---\n" + GOOD_AND_BAD.split("---")[0])
    (tmp_path / "b.json").write_text(
        json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ProvisioningRequestConfig"})
    )
    kinds = frozenset(
        ("kueue.x-k8s.io/" + v, "ProvisioningRequestConfig") for v in ("v1beta1", "v1beta2")
    )
    kept = Kept(kinds=kinds, documents=[])
    objects, errors = decode_files([tmp_path / "a.yaml", tmp_path / "b.json"], kept=kept)
    assert (len(objects), errors) == (1, [])  # the ResourceFlavor
    assert [d.get("metadata", {}).get("name") for d in kept.documents] == ["gpu", None]
    assert kept.documents[0]["spec"] == {"provisioningClassName": "queued"}
    _, errors = decode_yaml(config)  # not kept: an unknown kind, as before
    assert [e.problem for e in errors] == [
        "kind ProvisioningRequestConfig in kueue.x-k8s.io/v1beta2 is not supported"
    ]


def test_missing_name_and_missing_kind_are_reported_with_the_document() -> None:
    objects, errors = decode_yaml(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {}\n---\n"
        "apiVersion: v1\n---\n- just\n- a list\n",
        source="x.yaml",
    )
    assert objects == []
    assert [str(e) for e in errors] == [
        "ResourceFlavor (x.yaml document 1): metadata.name: is required",
        "x.yaml document 2: kind: is required and must be a string",
        "x.yaml document 3: (document): expected an object, got a list",
    ]


def test_unpacks_kind_list() -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": "a"},
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "b"},
            },
        ],
    }
    objects, errors = decode_documents([doc])
    assert errors == []
    assert [o.name for o in objects if isinstance(o, ClusterQueue)] == ["a", "b"]


def test_structural_error_strips_the_dollar_and_names_the_field() -> None:
    _, errors = decode_yaml(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\n"
        "metadata: {name: f, labels: {tier: 1}}\n"
    )
    assert [str(e) for e in errors] == [
        "ResourceFlavor/f: metadata.labels[...]: expected a string, got an integer"
    ]


def test_decodes_yaml_and_json_files(tmp_path: Path) -> None:
    yaml_file = tmp_path / "queues.yaml"
    yaml_file.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n"
        "metadata: {name: main, namespace: ml}\nspec: {clusterQueue: team-a}\n"
    )
    json_file = tmp_path / "flavor.json"
    json_file.write_text(
        json.dumps(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "f"},
            }
        )
    )
    broken = tmp_path / "broken.json"
    broken.write_text("{\n  nope\n}")
    missing = tmp_path / "missing.yaml"
    objects, errors = decode_files([yaml_file, json_file, broken, missing])
    assert [type(o) for o in objects] == [LocalQueue, ResourceFlavor]
    assert [(e.obj, e.path) for e in errors] == [
        (str(broken), "line 2"),
        (str(missing), "(file)"),
    ]
