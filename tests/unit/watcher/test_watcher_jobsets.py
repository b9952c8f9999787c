"""A JobSet in the cluster (jobset.x-k8s.io/v1alpha2) is watched as Kueue's JobSet integration
reads it: submitted once as its Workload, its succeeded child Jobs' pods told reclaimable, its
end (Completed or Failed) the workload's `finished`; a hostile one is dead-lettered naming the
field; its child Jobs are never workloads of their own."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from test_watcher_batch import Marks, Poison
from watcher_pods import Stream

from muster.api.jobset import workload_name_for_jobset
from muster.bus.poison import Quarantine
from muster.cluster import ClusterChange
from muster.watcher import translate
from muster.watcher.handlers import WatcherContext
from muster.watcher.outbox import Outbox
from muster.watcher.service import _handle_batch

pytestmark = pytest.mark.timeout(10)


def jobset(
    *, version: int, status: dict[str, Any] | None = None, replicas: Any = 3
) -> dict[str, Any]:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "namespace": "ns",
            "name": "train",
            "uid": "js-uid",
            "resourceVersion": str(version),
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {"name": "driver", "template": {"spec": {"template": template}}},
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {"spec": {"parallelism": 2, "template": template}},
                },
            ],
        },
        "status": status or {},
    }


def change(obj: dict[str, Any]) -> ClusterChange:
    return ClusterChange(kind="JobSet", type="MODIFIED", key="jobset.ns.train", obj=obj, revision=0)


async def published(objects: list[dict[str, Any]]) -> tuple[list[Any], Poison]:
    stream, poison = Stream(), Poison()
    ctx = WatcherContext(cluster="local", outbox=Outbox(stream), marks=Marks())
    for obj in objects:
        await _handle_batch([change(obj)], ctx, cast(Quarantine, poison), groups=None, events=None)
        await ctx.outbox.flush()
    return list(stream.stored), poison


async def test_a_jobset_is_submitted_once_then_told_reclaimable_then_finished() -> None:
    workers_done = {"replicatedJobsStatus": [{"name": "workers", "succeeded": 1}]}
    completed = {
        **workers_done,
        "conditions": [{"type": "Completed", "status": "True", "message": "jobs done"}],
    }
    envs, _ = await published(
        [
            jobset(version=1),
            jobset(version=2),  # nothing new
            jobset(version=3, status=workers_done),
            jobset(version=4, status=completed),
            jobset(version=5, status=completed),  # told once
        ]
    )

    assert [env.type for env in envs] == [
        "workload.submitted",
        "workload.reclaimable_pods",
        "workload.finished",
    ]
    key = f"ns/{workload_name_for_jobset('train', 'js-uid')}"
    assert {env.workload for env in envs} == {key}
    manifest = json.loads(envs[0].submitted.manifest_json)
    assert [(p["name"], p["count"]) for p in manifest["spec"]["podSets"]] == [
        ("driver", 1),
        ("workers", 6),
    ]
    assert envs[0].submitted.queue_name == "lq"
    assert [(p.pod_set, p.count) for p in envs[1].reclaimable_pods.pods] == [("workers", 2)]
    assert (envs[2].finished.succeeded, envs[2].finished.message) == (True, "jobs done")


async def test_a_failed_jobset_finishes_its_workload_unsucceeded() -> None:
    failed = {"conditions": [{"type": "Failed", "status": "True"}]}
    envs, _ = await published([jobset(version=1), jobset(version=2, status=failed)])

    assert [env.type for env in envs] == ["workload.submitted", "workload.finished"]
    assert (envs[1].finished.succeeded, envs[1].finished.message) == (False, "JobSet failed")


async def test_a_hostile_jobset_is_dead_lettered_naming_the_field() -> None:
    envs, poison = await published([jobset(version=1, replicas=-4)])

    assert envs == []
    (why,) = poison.objects
    assert "JobSet/ns/train: spec.replicatedJobs[1].replicas: must be >= 0, got -4" in why


def test_a_jobsets_child_job_and_its_workload_are_not_sources() -> None:
    owner = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": "train",
        "controller": True,
    }
    child = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train-workers-0",
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "ownerReferences": [owner],
        },
    }
    its_workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "jobset-train-12345", "ownerReferences": [owner]},
    }

    assert translate.is_workload_source(jobset(version=1))
    assert not translate.is_workload_source(child)
    assert not translate.is_workload_source(its_workload)
    assert translate.is_kueue_workload(its_workload)
