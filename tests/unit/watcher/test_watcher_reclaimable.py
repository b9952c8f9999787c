"""The watcher tells admission a workload's reclaimable pods when they change: a Job's finished
pods (Kueue's Job rule) or a Kueue Workload's status.reclaimablePods; a first sight's are in
its `submitted`."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from test_watcher_batch import Marks, Poison
from watcher_pods import Stream

from muster.bus.poison import Quarantine
from muster.cluster import ClusterChange
from muster.watcher.handlers import WatcherContext
from muster.watcher.outbox import Outbox
from muster.watcher.service import _handle_batch

pytestmark = pytest.mark.timeout(10)


def job(succeeded: int, version: int) -> ClusterChange:
    obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "namespace": "ns",
            "name": "sweep",
            "uid": "job-uid",
            "resourceVersion": str(version),
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
        },
        "spec": {
            "suspend": True,
            "parallelism": 4,
            "completions": 10,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}},
        },
        "status": {"succeeded": succeeded},
    }
    return ClusterChange(kind="Job", type="MODIFIED", key="job.ns.sweep", obj=obj, revision=0)


def kueue_workload(reclaimable: list[dict[str, Any]], version: int) -> ClusterChange:
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "namespace": "ns",
            "name": "w",
            "uid": "w-uid",
            "resourceVersion": str(version),
        },
        "spec": {
            "queueName": "lq",
            "podSets": [
                {"name": "main", "count": 3, "template": {"spec": {"containers": [{"name": "c"}]}}}
            ],
        },
        "status": {"reclaimablePods": reclaimable},
    }
    return ClusterChange(kind="Workload", type="MODIFIED", key="wl.ns.w", obj=obj, revision=0)


async def told(changes: list[ClusterChange]) -> list[tuple[str, list[tuple[str, int]]]]:
    stream = Stream()
    ctx = WatcherContext(cluster="local", outbox=Outbox(stream), marks=Marks())
    for c in changes:
        await _handle_batch([c], ctx, cast(Quarantine, Poison()), groups=None, events=None)
        await ctx.outbox.flush()
    out = []
    for env in stream.stored:
        if env.HasField("reclaimable_pods"):
            pods = [(p.pod_set, p.count) for p in env.reclaimable_pods.pods]
            out.append((env.type, pods))
        else:  # a submitted: what its manifest carries
            status = json.loads(env.submitted.manifest_json).get("status", {})
            pods = [(p["name"], p["count"]) for p in status.get("reclaimablePods", [])]
            out.append((env.type, pods))
    return out


async def test_a_jobs_succeeded_pods_are_told_once_fewer_remain_than_run_at_once() -> None:
    changes = [job(0, 1), job(5, 2), job(7, 3), job(7, 4), job(8, 5)]
    assert await told(changes) == [
        ("workload.submitted", []),
        # 5 succeeded: 5 remain, all 4 still needed; nothing to tell
        ("workload.reclaimable_pods", [("main", 1)]),  # 7: 3 remain
        ("workload.reclaimable_pods", [("main", 2)]),  # 8: 2 remain
    ]


async def test_a_kueue_workloads_status_is_told_as_it_changes_back_and_forth() -> None:
    some = [{"name": "main", "count": 2}]
    changes = [
        kueue_workload(some, 1),  # carried by its submitted
        kueue_workload(some, 2),
        kueue_workload([], 3),
        kueue_workload(some, 4),
    ]
    assert await told(changes) == [
        ("workload.submitted", [("main", 2)]),
        ("workload.reclaimable_pods", []),
        ("workload.reclaimable_pods", [("main", 2)]),
    ]
