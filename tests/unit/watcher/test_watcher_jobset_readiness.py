"""A JobSet's readiness (waitForPodsReady) is its child Jobs' counts, as Kueue's JobSet
integration reads it (`PodsReady`: ready plus succeeded summed over
`status.replicatedJobsStatus` equal the replicas summed over its replicatedJobs), not its pods':
pods all Ready under a JobSet whose counts lag say `running` not ready, and the counts catching
up then tell `pods_ready`; counts falling back tell readiness lost. The same for a MultiKueue
copy of a JobSet in a worker, under the manager's workload key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pytest
from test_watcher_batch import Marks, Poison
from test_watcher_jobsets import jobset
from watcher_pods import Stream, changed, pod

from muster.api.jobset import workload_name_for_jobset
from muster.bus.poison import Quarantine
from muster.cluster import ClusterChange
from muster.watcher.handlers import WatcherContext, know_owner_readiness
from muster.watcher.outbox import Outbox
from muster.watcher.pods import pod_state
from muster.watcher.resume import know_listed
from muster.watcher.service import _handle_batch

pytestmark = pytest.mark.timeout(10)

WL = workload_name_for_jobset("train", "js-uid")  # driver 1 x 1 pod, workers 1 x 2 pods
COPY_OF = "jobset-train-abcde"  # the manager's Workload a worker's copy stands for


def counts(driver_ready: int, workers_ready: int, *, workers_succeeded: int = 0) -> dict[str, Any]:
    rows = [
        {"name": "driver", "ready": driver_ready, "succeeded": 0},
        {"name": "workers", "ready": workers_ready, "succeeded": workers_succeeded},
    ]
    return {"replicatedJobsStatus": rows}


def worker_copy(version: int, status: dict[str, Any]) -> dict[str, Any]:
    """The worker's copy of a manager's JobSet (origin and prebuilt-workload labels)."""
    obj = jobset(version=version, status=status, replicas=1)
    obj["metadata"]["labels"] |= {
        "kueue.x-k8s.io/multikueue-origin": "manager",
        "kueue.x-k8s.io/prebuilt-workload-name": COPY_OF,
    }
    return obj


class KubeWorkloads:
    """On Kubernetes a queued JobSet gets its Kueue Workload; here, its name."""

    async def create_workload_for_job(self, job: Mapping[str, Any]) -> str:
        return WL


class Watcher:
    """A watcher of a Kubernetes cluster (`kube`), or of a simulated one."""

    def __init__(self, cluster: str = "local", *, kube: bool = True) -> None:
        self.stream, self.poison = Stream(), Poison()
        self.ctx = WatcherContext(
            cluster=cluster,
            outbox=Outbox(self.stream),
            marks=Marks(),
            workloads=KubeWorkloads() if kube else None,
        )

    def stream_fields(self) -> list[tuple[str, Any]]:
        """Everything published so far: (field, payload)."""
        envs = self.stream.stored
        return [(e.WhichOneof("payload"), getattr(e, e.WhichOneof("payload"))) for e in envs]

    async def see(self, *changes: ClusterChange) -> list[tuple[str, Any]]:
        """What the changes, one batch each, made the watcher publish: (field, payload)."""
        before = len(self.stream.stored)
        for c in changes:
            await _handle_batch(
                [c], self.ctx, cast(Quarantine, self.poison), groups=None, events=None
            )
            await self.ctx.outbox.flush()
        return self.stream_fields()[before:]


def of_jobset(obj: dict[str, Any]) -> ClusterChange:
    return ClusterChange(kind="JobSet", type="MODIFIED", key="jobset.ns.train", obj=obj, revision=0)


def readiness(published: list[tuple[str, Any]]) -> list[tuple[str, bool]]:
    """The readiness told: ("running", pods_ready) and ("pods_ready", not lost)."""
    out = []
    for field, payload in published:
        if field == "running":
            out.append((field, payload.pods_ready))
        elif field == "pods_ready":
            out.append((field, not payload.lost))
    return out


async def test_ready_pods_wait_for_the_jobsets_counts_then_lose_readiness_with_them() -> None:
    w = Watcher()
    await w.see(of_jobset(jobset(version=1, status=counts(0, 0), replicas=1)))
    pods = [pod(i, "Running", of=WL) for i in range(3)]

    # Every pod Running and Ready, but the JobSet counts no ready Job yet: not ready.
    assert readiness(await w.see(*map(changed, pods))) == [("running", False)]
    # Its counts reach its replicas (1 driver + 1 workers Job): ready, told once.
    told = await w.see(of_jobset(jobset(version=2, status=counts(1, 1), replicas=1)))
    assert readiness(told) == [("pods_ready", True)]
    assert await w.see(of_jobset(jobset(version=3, status=counts(1, 1), replicas=1))) == []
    # A Job no longer ready: readiness lost, though no pod changed.
    lost = await w.see(of_jobset(jobset(version=4, status=counts(1, 0), replicas=1)))
    assert readiness(lost) == [("pods_ready", False)]


async def test_a_succeeded_job_counts_as_ready_and_the_sum_is_over_all_replicated_jobs() -> None:
    w = Watcher()
    await w.see(of_jobset(jobset(version=1, status=counts(0, 0), replicas=2)))
    pods = [pod(i, "Running", of=WL) for i in range(5)]
    assert readiness(await w.see(*map(changed, pods))) == [("running", False)]
    # 1 + 1 of 3 replicas: not ready; then the second workers Job succeeded: 3 of 3.
    assert await w.see(of_jobset(jobset(version=2, status=counts(1, 1), replicas=2))) == []
    done = counts(1, 1, workers_succeeded=1)
    assert readiness(await w.see(of_jobset(jobset(version=3, status=done, replicas=2)))) == [
        ("pods_ready", True)
    ]


async def test_a_worker_tells_a_copys_readiness_from_the_copys_counts() -> None:
    w = Watcher(cluster="east")
    await w.see(changed(worker_copy(1, counts(0, 0))))
    pods = [pod(i, "Running", of=COPY_OF) for i in range(3)]
    assert readiness(await w.see(*map(changed, pods))) == [("running", False)]
    told = await w.see(changed(worker_copy(2, counts(1, 1))))
    assert readiness(told) == [("pods_ready", True)]
    assert {e.workload for e in w.stream.stored} == {f"ns/{COPY_OF}"}


async def test_a_resumed_start_decides_listed_pods_by_the_listed_jobsets_counts() -> None:
    """At a resumed start the pods are decided from the lists before the watch shows the
    JobSet: its listed counts decide, so ready pods under a JobSet whose counts lag are not
    told ready, only to be told lost when the watch shows it."""
    w = Watcher()  # a watcher started again: it knows nothing of the JobSet yet
    listed = jobset(version=1, status=counts(0, 0), replicas=1)
    know_owner_readiness(w.ctx, [listed])
    states = [pod_state(pod(i, "Running", of=WL)) for i in range(3)]
    know_listed(w.ctx, [s for s in states if s is not None], gone=[])
    await w.ctx.outbox.flush()

    assert readiness(w.stream_fields()) == [("running", False)]
    shown = await w.see(of_jobset(jobset(version=2, status=counts(0, 0), replicas=1)))
    assert readiness(shown) == []


async def test_on_a_simulated_cluster_the_pods_tell_as_no_controller_keeps_the_counts() -> None:
    w = Watcher(kube=False)
    await w.see(of_jobset(jobset(version=1, status=counts(0, 0), replicas=1)))
    pods = [pod(i, "Running", of=WL) for i in range(3)]

    assert readiness(await w.see(*map(changed, pods))) == [("running", True)]


async def test_a_copys_counts_written_as_strings_count_for_nothing_and_the_pods_decide() -> None:
    """The API server keeps a JobSet's counts as integers only: a copy whose status says
    `"ready": "1"` counts no ready Job (it read as 1 before), so its pods tell its readiness,
    as any workload's. (The manager's own JobSet so written is dead-lettered whole.)"""
    w = Watcher(cluster="east")
    as_text = {
        "replicatedJobsStatus": [
            {"name": "driver", "ready": "1", "succeeded": "0"},
            {"name": "workers", "ready": "1", "succeeded": "0"},
        ]
    }
    await w.see(changed(worker_copy(1, as_text)))
    starting = [pod(i, "Running", ready=False, of=COPY_OF) for i in range(3)]

    assert readiness(await w.see(*map(changed, starting))) == [("running", False)]
    ready = [pod(i, "Running", of=COPY_OF) for i in range(3)]
    assert readiness(await w.see(*map(changed, ready))) == [("pods_ready", True)]
