"""A JobSet routed to an alternative on Kubernetes (docs/routing.md, "On Kubernetes"): every
service with `--cluster-backend kube` against the API-server stand-in with its Job and JobSet
controllers. A JobSet behind the busy GPU queue is routed, as a whole, to the CPU queue: every
replicatedJob's pod template gets that queue's flavor's node selector and its child Jobs' pods
run on its nodes; preempted there, the JobSet is suspended with its templates as its owner
wrote them. (A JobSet's alternative cannot change requests: refused at submission, see
tests/scenarios/invalid/jobset-alternative-requests.yaml.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import Stack, condition_when, eventually, job_when, running_stack
from test_kube_jobsets_e2e import create, get_jobset, jobset, node_selectors, workload_of
from test_kube_routing_e2e import BUSY, CLUSTER, URGENT, routed_to

pytestmark = pytest.mark.timeout(120)


def light_jobset() -> dict[str, Any]:
    """JobSet `light` on the GPU queue: a driver and a worker of one 4-cpu pod each, more than
    `busy` leaves there for 600 s; 26 s there, or 60 s on the CPU queue."""
    light = jobset("light", "", {"driver": 1, "worker": 1}, namespace="sd", queue="gpu", cpu="4")
    light["metadata"]["annotations"] = {
        "muster.dev/run-seconds": "26",
        "muster.dev/alternatives": "[{queueName: cpu, runSeconds: 60}]",
    }
    return light


async def light_when(stack: Stack, *, suspended: bool) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        js = await get_jobset(stack.kubectl, "light", namespace="sd")
        return js if js is not None and js["spec"]["suspend"] is suspended else None

    return await eventually(check)


async def test_a_jobset_routed_to_its_alternative_runs_on_that_queues_nodes(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        kubectl = stack.kubectl
        stack.server.faults.fail_next(2, status=500, verb="update", path="/jobsets/")
        await kubectl.apply(CLUSTER + BUSY)
        await job_when(kubectl, "sd", "busy", suspended=False)
        await create(kubectl, light_jobset(), namespace="sd")
        name = await workload_of(kubectl, "light", namespace="sd")
        assert await routed_to(stack, f"sd/{name}") == ["cpu"]
        await condition_when(kubectl, "Workload", name, "sd", "Admitted", "True")
        stored = await kubectl.get("Workload", name, "sd")
        assert stored is not None
        assert stored["status"]["admission"]["clusterQueue"] == "cpu"

        running = await light_when(stack, suspended=False)
        assert node_selectors(running) == [{"pool": "cpu"}] * 2

        async def bound() -> list[dict[str, Any]] | None:
            pods = [
                p
                for p in await kubectl.list_pods("sd")
                if p["metadata"]["name"].startswith("light-") and p["spec"].get("nodeName")
            ]
            return pods if len(pods) == 2 else None

        pods = await eventually(bound)
        assert {p["spec"]["nodeName"] for p in pods} == {"cpu-node"}

        # Preempted on the CPU queue by an urgent Job: suspended, its templates as written.
        await kubectl.apply(URGENT)
        evicted = await condition_when(kubectl, "Workload", name, "sd", "Evicted", "True")
        assert evicted["reason"] == "Preempted"
        stopped = await light_when(stack, suspended=True)
        assert node_selectors(stopped) == [None, None]
        await job_when(kubectl, "sd", "urgent", suspended=False)
