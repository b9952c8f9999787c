"""gangpermit.cache: store changes reach the sink decoded, deletions with their last state."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any, cast

from muster.api import decode_documents
from muster.api.model import Node, Pod, SchedulingWorkload
from muster.cluster.backend import ChangeType, ClusterBackend, ClusterChange
from muster.cluster.keys import node_key, object_key, pod_key
from muster.gangpermit.cache import YIELD_EVERY, CachedObject, ClusterCache


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def put(self, obj: CachedObject) -> bool:
        self.calls.append(("put", f"{type(obj).__name__}/{obj.meta.name}"))
        return True

    def remove(self, obj: CachedObject) -> None:
        self.calls.append(("remove", f"{type(obj).__name__}/{obj.meta.name}"))


def change(*, type: ChangeType, key: str, obj: dict[str, Any], revision: int) -> ClusterChange:
    """A change as a backend's watch yields it; the cache goes by the key, not by `kind`."""
    return ClusterChange(kind=obj.get("kind", ""), type=type, key=key, obj=obj, revision=revision)


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
    cache = ClusterCache(
        cast(ClusterBackend, None), sink=sink, on_change=lambda: woken.append(None)
    )
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
        cache.apply(change(type=kind, key=key, obj=obj, revision=revision))

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
        def put(self, obj: CachedObject) -> bool:
            got.append(obj)
            return True

    cache = ClusterCache(cast(ClusterBackend, None), sink=Keep())
    for revision, (key, obj) in enumerate(
        [(node_key("n1"), NODE), (pod_key("ns", "p"), POD),
         (object_key("Workload.scheduling.k8s.io", "ns", "w"), GANG_WORKLOAD)], start=1
    ):  # fmt: skip
        cache.apply(change(type="ADDED", key=key, obj=obj, revision=revision))

    node, pod, workload = got
    assert isinstance(node, Node)
    assert isinstance(pod, Pod)
    assert isinstance(workload, SchedulingWorkload)
    assert pod.requests == {"cpu": 1000}
    assert [g.name for g in workload.pod_groups] == ["g"]


class Keeping(Recording):
    def __init__(self) -> None:
        super().__init__()
        self.objects: list[CachedObject] = []

    def put(self, obj: CachedObject) -> bool:
        self.objects.append(obj)
        return super().put(obj)


def rebound(obj: dict[str, Any], *, node: str, phase: str) -> dict[str, Any]:
    """`obj` as a bind and the kubelet leave it: node set, status changed, resourceVersion new."""
    meta = {**obj["metadata"], "resourceVersion": "42"}
    return {
        **obj,
        "metadata": meta,
        "spec": {**obj["spec"], "nodeName": node},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_pod_changed_only_in_node_and_status_is_the_one_decoded_before_updated() -> None:
    sink = Keeping()
    cache = ClusterCache(cast(ClusterBackend, None), sink=sink)
    key = pod_key("ns", "p")
    changes = [POD, *(rebound(POD, node="n1", phase=p) for p in ("Pending", "Running"))]
    for revision, obj in enumerate(changes, start=1):
        cache.apply(change(type="MODIFIED", key=key, obj=obj, revision=revision))

    first, bound, running = sink.objects
    assert isinstance(first, Pod)
    assert isinstance(bound, Pod)
    assert isinstance(running, Pod)
    assert (bound.node_name, bound.phase) == ("n1", "Pending")
    assert (running.node_name, running.phase) == ("n1", "Running")
    assert bound.requests is first.requests  # not decoded again
    decoded, errors = decode_documents([changes[2]])
    assert errors == []
    assert decoded == [running]  # what a full decode gives


def test_a_pod_whose_status_does_not_decode_is_decoded_whole_and_left_out() -> None:
    sink = Recording()
    cache = ClusterCache(cast(ClusterBackend, None), sink=sink)
    key = pod_key("ns", "p")
    bad = rebound(POD, node="n1", phase="Lost")  # not a pod phase
    for revision, obj in enumerate([POD, bad], start=1):
        cache.apply(change(type="MODIFIED", key=key, obj=obj, revision=revision))

    assert sink.calls == [("put", "Pod/p"), ("remove", "Pod/p")]


def test_only_changes_the_sink_calls_news_wake_the_passes() -> None:
    class Quiet(Recording):
        def put(self, obj: CachedObject) -> bool:
            super().put(obj)
            return isinstance(obj, Node)  # say pods change no decision

    woken: list[None] = []
    cache = ClusterCache(
        cast(ClusterBackend, None), sink=Quiet(), on_change=lambda: woken.append(None)
    )
    cache.apply(change(type="ADDED", key=pod_key("ns", "p"), obj=POD, revision=1))
    assert woken == []
    cache.apply(change(type="ADDED", key=node_key("n1"), obj=NODE, revision=2))
    cache.apply(change(type="DELETED", key=pod_key("ns", "p"), obj=POD, revision=3))
    assert len(woken) == 2  # a node, and a pod gone (its room is free)


class Burst:
    """A watch whose changes have all arrived: each comes without a wait (a large Job's pods)."""

    def __init__(self, pods: int) -> None:
        self.pods = pods

    async def watch(self, **_: Any) -> AsyncIterator[ClusterChange]:
        for i in range(self.pods):
            obj = {**POD, "metadata": {"name": f"p{i}", "namespace": "ns"}}
            yield change(type="ADDED", key=pod_key("ns", f"p{i}"), obj=obj, revision=i + 1)
        await asyncio.Event().wait()  # then nothing more, until cancelled


async def test_a_burst_of_changes_lets_the_rest_of_the_loop_run_between_runs_of_them() -> None:
    total = 3 * YIELD_EVERY
    sink = Recording()
    cache = ClusterCache(cast(ClusterBackend, Burst(total)), sink=sink)
    seen = [0]  # the changes applied so far, at each turn another task got

    task = asyncio.create_task(cache.run())
    while seen[-1] < total and len(seen) < 10 * total:
        await asyncio.sleep(0)
        seen.append(len(sink.calls))
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert seen[-1] == total
    assert max(b - a for a, b in itertools.pairwise(seen)) <= YIELD_EVERY
