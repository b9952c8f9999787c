"""kueuectl's verbs on Kubernetes, end to end: `muster stop|resume|delete` through a gateway
with `--cluster-backend kube` write into the API server as the caller (a Kueue Workload's
spec.active, a ClusterQueue's stopPolicy, a deletion), and a `kubectl patch` of spec.active
(what kueuectl itself writes) counts the same: the watcher publishes what changed, admission
stops or resumes the workload, the binder suspends or starts its Job."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_services_helpers import (
    condition,
    condition_when,
    eventually,
    job_when,
    patch_active,
    running_stack,
    workload_of_job,
)
from test_kube_checks_e2e import job_yaml, queues
from test_kube_services_e2e import NODE
from test_kube_submit_e2e import kube_gateway, muster

from muster.cluster.kube.settings import KubeConfig
from muster.gateway.auth_config import SecurityConfig

pytestmark = pytest.mark.timeout(90)


async def test_stop_resume_and_delete_write_into_the_api_server(tmp_path: Path) -> None:
    async with running_stack(tmp_path) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(queues(None) + "---" + NODE)
        await kubectl.apply(job_yaml("train") + "---" + job_yaml("tune"))
        train = (await workload_of_job(kubectl, "ml", "train"))["metadata"]["name"]
        tune = (await workload_of_job(kubectl, "ml", "tune"))["metadata"]["name"]
        await job_when(kubectl, "ml", "train", suspended=False)
        security = SecurityConfig(kube=KubeConfig(host=stack.server.url))
        async with kube_gateway(stack.bus, security) as gateway:
            # Stop: spec.active false in the API server; the Job is suspended, its quota freed.
            assert await muster("stop", "workload", "train", "-n", "ml", "--gateway", gateway) == 0
            wl = await kubectl.get("Workload", train, "ml") or {}
            assert wl["spec"]["active"] is False
            await job_when(kubectl, "ml", "train", suspended=True)
            stopped = await condition_when(
                kubectl, "Workload", train, "ml", "QuotaReserved", "False"
            )
            assert stopped["message"] == "The workload is deactivated"
            assert condition(await kubectl.get("Workload", train, "ml"), "Evicted")["reason"] == (
                "Deactivated"
            )
            held = await condition_when(kubectl, "Workload", train, "ml", "Requeued", "False")
            assert (held["reason"], held["message"]) == (
                "Deactivated",
                "The workload is deactivated",
            )

            # Resume: active again, admitted again, started again.
            assert (
                await muster("resume", "workload", "train", "-n", "ml", "--gateway", gateway) == 0
            )
            await job_when(kubectl, "ml", "train", suspended=False)
            back = await condition_when(kubectl, "Workload", train, "ml", "Requeued", "True")
            assert (back["reason"], back["message"]) == (
                "Reactivated",
                "The workload was reactivated",
            )

            # Holding the ClusterQueue (HoldAndDrain) is its stopPolicy, set in the API server.
            assert await muster("stop", "clusterqueue", "cq", "--gateway", gateway) == 0
            cq = await kubectl.get("ClusterQueue", "cq") or {}
            assert cq["spec"]["stopPolicy"] == "HoldAndDrain"
            await job_when(kubectl, "ml", "train", suspended=True)  # drained
            drained = await condition_when(kubectl, "Workload", train, "ml", "Requeued", "False")
            assert drained["reason"] == "ClusterQueueStopped"  # until the queue runs again
            assert await muster("resume", "clusterqueue", "cq", "--gateway", gateway) == 0
            await job_when(kubectl, "ml", "train", suspended=False)
            again = await condition_when(kubectl, "Workload", train, "ml", "Requeued", "True")
            assert (again["reason"], again["message"]) == (
                "ClusterQueueRestarted",
                "The ClusterQueue was restarted after being stopped",
            )

            # Delete: a Job's workload goes with its Job.
            assert (
                await muster(
                    "delete", "workload", "train", "-n", "ml", "--yes", "--gateway", gateway
                )
                == 0
            )

            async def gone() -> bool:
                return await kubectl.get("Job", "train", "ml") is None

            await eventually(gone)

        # kueuectl writes spec.active itself: the watcher tells admission all the same.
        await job_when(kubectl, "ml", "tune", suspended=False)
        await patch_active(kubectl, "ml", tune, False)
        await job_when(kubectl, "ml", "tune", suspended=True)
        await condition_when(kubectl, "Workload", tune, "ml", "Requeued", "False")
        await patch_active(kubectl, "ml", tune, True)
        await job_when(kubectl, "ml", "tune", suspended=False)
        changes = [
            e.active_changed.active
            for e in await stack.events.told(f"ml/{tune}", "workload.active_changed")
        ]
        assert changes == [False, True]

        # A workload that only waits, deactivated: Kueue's controller evicts it all the same.
        await kubectl.apply(job_yaml("huge", parallelism=20))  # 20 cpu: more than cq's 16
        huge = (await workload_of_job(kubectl, "ml", "huge"))["metadata"]["name"]
        waiting = await condition_when(kubectl, "Workload", huge, "ml", "QuotaReserved", "False")
        assert waiting["reason"] == "ExceedsMaxQuota"
        await patch_active(kubectl, "ml", huge, False)
        evicted = await condition_when(kubectl, "Workload", huge, "ml", "Evicted", "True")
        assert (evicted["reason"], evicted["message"]) == (
            "Deactivated",
            "The workload is deactivated",
        )
        reserved = condition(await kubectl.get("Workload", huge, "ml"), "QuotaReserved")
        assert reserved["reason"] == "Deactivated"
