"""The list limits of the CRDs muster ships (k8s/crds) are the ones muster's own validation
applies (`muster.api.validate`, read from Kueue's API types): a Kubernetes cluster and
`muster submit` refuse the same objects. They had drifted apart (the CRDs said 16 flavors and 8
podsets where Kueue's types, and muster, allow 64 and 18)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from muster.api.validate import MAX_GROUP_ITEMS, MAX_POD_SETS, MAX_RESOURCE_GROUPS

CRDS = Path(__file__).resolve().parents[2] / "k8s" / "crds"


def specs(file: str) -> list[tuple[str, dict[str, Any]]]:
    """(version, its spec schema) of the CRD in `file`."""
    crd = yaml.safe_load((CRDS / file).read_text())
    return [
        (v["name"], v["schema"]["openAPIV3Schema"]["properties"]["spec"])
        for v in crd["spec"]["versions"]
    ]


@pytest.mark.parametrize("file", ["clusterqueues.yaml", "cohorts.yaml"])
def test_resource_group_limits_are_muster_s(file: str) -> None:
    for version, spec in specs(file):
        groups = spec["properties"]["resourceGroups"]
        assert groups["maxItems"] == MAX_RESOURCE_GROUPS, (file, version)
        group = groups["items"]["properties"]
        flavors = group["flavors"]
        limits = {
            "coveredResources": group["coveredResources"].get("maxItems"),
            "flavors": flavors.get("maxItems"),
            "resources": flavors["items"]["properties"]["resources"].get("maxItems"),
        }
        assert limits == dict.fromkeys(limits, MAX_GROUP_ITEMS), (file, version)


def test_podset_limit_is_muster_s() -> None:
    for version, spec in specs("workloads.yaml"):
        assert spec["properties"]["podSets"]["maxItems"] == MAX_POD_SETS, version
