"""gangpermit.cache: store changes reach the sink decoded, deletions with their last state."""

from __future__ import annotations

from typing import Any, cast

from muster.api.model import Node, Pod, SchedulingWorkload
from muster.cluster.backend import ChangeType
from muster.cluster.sim.keys import node_key, object_key, pod_key
from muster.cluster.sim.store import SimStore, StoreChange
from muster.gangpermit.cache import CachedObject, ClusterCache


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def put(self, obj: CachedObject) -> None:
        self.calls.append(("put", f"{type(obj).__name__}/{obj.meta.name}"))

    def remove(self, obj: CachedObject) -> None:
        self.calls.append(("remove", f"{type(obj).__name__}/{obj.meta.name}"))


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
}
GANG_WORKLOAD = {
    "apiVersion": "scheduling.k8s.io/v1alpha1",
    "kind": "Workload",
    "metadata": {"name": "w", "namespace": "ns"},
    "spec": {"podGroups": [{"name": "g", "policy": {"basic": {}}}]},
}
KUEUE_WORKLOAD = {**GANG_WORKLOAD, "apiVersion": "kueue.x-k8s.io/v1beta2"}


def test_watched_kinds_are_decoded_and_others_skipped() -> None:
    sink = Recording()
    woken: list[None] = []
    cache = ClusterCache(cast(SimStore, None), sink=sink, on_change=lambda: woken.append(None))
    changes: list[tuple[ChangeType, str, dict[str, Any]]] = [
        ("ADDED", node_key("n1"), NODE),
        ("ADDED", pod_key("ns", "p"), POD),
        ("ADDED", object_key("Workload.scheduling.k8s.io", "ns", "w"), GANG_WORKLOAD),
        ("ADDED", object_key("Workload", "ns", "w"), KUEUE_WORKLOAD),  # admission's, not ours
        ("ADDED", pod_key("ns", "bad"), {**POD, "spec": {"containers": "no"}}),
        ("DELETED", pod_key("ns", "p"), {}),  # a tombstone without a body: the last state kept
        ("DELETED", pod_key("ns", "never-seen"), POD),
    ]
    for revision, (kind, key, obj) in enumerate(changes, start=1):
        cache.apply(StoreChange(type=kind, key=key, obj=obj, revision=revision))

    assert sink.calls == [
        ("put", "Node/n1"),
        ("put", "Pod/p"),
        ("put", "SchedulingWorkload/w"),
        ("remove", "Pod/p"),
    ]
    assert len(woken) == 4


def test_decoded_objects_are_the_api_model() -> None:
    got: list[CachedObject] = []

    class Keep(Recording):
        def put(self, obj: CachedObject) -> None:
            got.append(obj)

    cache = ClusterCache(cast(SimStore, None), sink=Keep())
    for revision, (key, obj) in enumerate(
        [(node_key("n1"), NODE), (pod_key("ns", "p"), POD),
         (object_key("Workload.scheduling.k8s.io", "ns", "w"), GANG_WORKLOAD)], start=1
    ):  # fmt: skip
        cache.apply(StoreChange(type="ADDED", key=key, obj=obj, revision=revision))

    node, pod, workload = got
    assert isinstance(node, Node)
    assert isinstance(pod, Pod)
    assert isinstance(workload, SchedulingWorkload)
    assert pod.requests == {"cpu": 1000}
    assert [g.name for g in workload.pod_groups] == ["g"]
