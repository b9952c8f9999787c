"""Reclaimable pods under MultiKueue, end to end: a Job submitted on the manager runs in a
worker; one of its pods succeeds there. The manager's Job, managed by MultiKueue, shows its
copy's status, and only through it does the manager's Workload get its status.reclaimablePods
(Kueue's job reconciler reads the manager's Job); the quota that pod held goes to a Job
waiting for it on the manager. The test plays the kubelet, as the other MultiKueue tests do."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import eventually, workload_of_job
from multikueue_stack import MANAGER, multikueue_stack
from test_kube_multikueue_e2e import (
    MANAGED_JOB,
    NAMESPACE,
    TEST_S,
    job_status,
    running_pods,
    start_workers,
    status_of,
)

pytestmark = pytest.mark.timeout(120)


def managed_job(name: str, pods: int, *, cpu: int = 1) -> str:
    return (
        MANAGED_JOB.replace("name: train", f"name: {name}")
        .replace("parallelism: 2", f"parallelism: {pods}")
        .replace("completions: 2", f"completions: {pods}")
        .replace('cpu: "1"', f'cpu: "{cpu}"')
    )


async def test_a_pod_that_succeeded_in_a_worker_gives_its_quota_back_on_the_manager(
    tmp_path: Path,
) -> None:
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        manager, east = stack.manager.kubectl, stack.clusters["east"]
        await start_workers(stack)  # the global ClusterQueue holds 8 cpu
        await manager.apply(managed_job("train", 4))
        wl = (await workload_of_job(manager, NAMESPACE, "train"))["metadata"]["name"]
        key = f"{NAMESPACE}/{wl}"
        assert (await status_of(manager, wl, Admitted="True"))["status"]["clusterName"] == "east"
        pods = await running_pods(east, key, 4)
        await manager.apply(managed_job("eval", 1, cpu=5))  # 4 + 5 cpu: it waits
        waiting = (await workload_of_job(manager, NAMESPACE, "eval"))["metadata"]["name"]
        await stack.events.wait_for(f"{NAMESPACE}/{waiting}", "workload.pending")

        # One pod succeeds in east: 3 of 4 completions remain, 1 pod is reclaimable.
        await east.kubectl.set_pod_phase(NAMESPACE, pods[0], "Succeeded")
        await job_status(manager, "train", succeeded=1)

        async def reclaimable() -> list[dict[str, Any]] | None:
            found = await manager.get("Workload", wl, NAMESPACE) or {}
            listed: list[dict[str, Any]] = (found.get("status") or {}).get("reclaimablePods") or []
            return listed or None

        assert await eventually(reclaimable) == [{"name": "main", "count": 1}]
        told = [e.cluster for e in await stack.events.told(key, "workload.reclaimable_pods")]
        assert told == [MANAGER]  # from the manager's Job: the worker's copy tells nothing
        # The cpu of the pod that succeeded (3 + 5 cpu) admits the Job that waited for it.
        await status_of(manager, waiting, QuotaReserved="True")
        train = await manager.get("Workload", wl, NAMESPACE) or {}
        assert train["status"]["admission"]["podSetAssignments"][0]["count"] == 4
