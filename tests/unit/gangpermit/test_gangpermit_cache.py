"""gangpermit.cache: the watched view gives what listing the cluster gives, change after change."""

from __future__ import annotations

from typing import Any, cast

import pytest

from muster.cluster.backend import ChangeType
from muster.cluster.objects import node_view, pod_view
from muster.cluster.sim.keys import node_key, pod_key
from muster.cluster.sim.store import SimStore, StoreChange
from muster.gangpermit.cache import ClusterCache
from muster.gangpermit.snapshot import index_pods, node_capacities


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, *, node_name: str = "", phase: str = "Pending") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ns", "name": name, "labels": {"muster.dev/workload": "w"}},
        "spec": spec,
        "status": {"phase": phase},
    }


class Listing:
    """What the cluster holds, as listing it would show."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def check(self, cache: ClusterCache) -> None:
        nodes = sorted(
            (node_view(o) for k, o in self.objects.items() if k.startswith("node.")),
            key=lambda v: v.name,
        )
        pods = [pod_view(o) for k, o in self.objects.items() if k.startswith("pod.")]
        assert cache.nodes() == nodes
        assert cache.pods == index_pods(pods)
        assert cache.capacities() == node_capacities(nodes, pods)


@pytest.mark.parametrize("order", ["nodes first", "pods first"])
def test_cache_matches_a_listing_through_binds_finishes_and_deletes(order: str) -> None:
    cache = ClusterCache(cast(SimStore, None))
    listing = Listing()
    revision = 0

    def change(kind: ChangeType, key: str, obj: dict[str, Any]) -> None:
        nonlocal revision
        revision += 1
        cache._apply(StoreChange(type=kind, key=key, obj=obj, revision=revision))
        if kind == "DELETED":
            listing.objects.pop(key, None)
        else:
            listing.objects[key] = obj
        listing.check(cache)

    nodes = [(node_key(n), node(n)) for n in ("n1", "n2")]
    pods = [(pod_key("ns", f"p{i}"), pod(f"p{i}")) for i in range(4)]
    for key, obj in (nodes + pods) if order == "nodes first" else (pods + nodes):
        change("ADDED", key, obj)
    change("MODIFIED", pods[0][0], pod("p0", node_name="n1"))
    change("MODIFIED", pods[1][0], pod("p1", node_name="n1", phase="Running"))
    change("MODIFIED", pods[2][0], pod("p2", node_name="n2", phase="Running"))
    change("MODIFIED", pods[1][0], pod("p1", node_name="n1", phase="Succeeded"))
    change("DELETED", pods[2][0], pod("p2", node_name="n2", phase="Running"))
    change("DELETED", pods[0][0], {})  # a tombstone without the last state
    change("DELETED", nodes[1][0], nodes[1][1])
    assert cache.revision == 0  # only the watch loop advances it
