"""Gateway.Submit of objects too large for the stack, against a real nats-server: ClusterQueues
past Kueue's list limits (16 resource groups, 64 covered resources and 64 flavors in each),
workloads of more than 100 000 pods. INVALID_ARGUMENT naming the field, nothing stored; the
largest allowed is taken."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
import yaml
from admission_world import cluster_queue, workload
from gateway_helpers import RunningGateway, running_gateway, stored_count

from muster.api.job import QUEUE_NAME_KEY
from muster.bus import Bus
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def gw(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus) as running:
        yield running


def wide(*, groups: int = 1, resources: int = 1, flavors: int = 1) -> dict[str, Any]:
    """A ClusterQueue `groups` x `resources` covered x `flavors` flavors (all distinct)."""
    cq = cluster_queue("wide")
    cq["spec"]["resourceGroups"] = [
        {
            "coveredResources": [f"example.com/r{g}-{r}" for r in range(resources)],
            "flavors": [
                {
                    "name": f"f{g}-{f}",
                    "resources": [
                        {"name": f"example.com/r{g}-{r}", "nominalQuota": "1"}
                        for r in range(resources)
                    ],
                }
                for f in range(flavors)
            ],
        }
        for g in range(groups)
    ]
    return cq


async def submit(gw: RunningGateway, doc: dict[str, Any]) -> tuple[grpc.StatusCode, str]:
    request = services_pb2.SubmitRequest(manifest=yaml.safe_dump(doc))
    try:
        await gw.gateway.Submit(request, timeout=30)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def test_a_cluster_queue_past_kueues_list_limits_is_refused_naming_the_field(
    gw: RunningGateway, bus: Bus
) -> None:
    bad = grpc.StatusCode.INVALID_ARGUMENT
    prefix = "ClusterQueue/wide: spec.resourceGroups"

    assert await submit(gw, wide(groups=17)) == (
        bad,
        f"{prefix}: must list at most 16 groups, got 17",
    )
    assert await submit(gw, wide(flavors=10_000)) == (
        bad,
        f"{prefix}[0].flavors: must list at most 64, got 10000",
    )
    assert await submit(gw, wide(resources=65)) == (
        bad,
        f"{prefix}[0].coveredResources: must list at most 64, got 65",
    )
    assert await stored_count(bus) == 0


async def test_the_widest_cluster_queue_kueue_takes_is_taken(gw: RunningGateway, bus: Bus) -> None:
    assert await submit(gw, wide(groups=16, resources=4, flavors=4)) == (grpc.StatusCode.OK, "")
    assert await submit(gw, wide(resources=64, flavors=64)) == (grpc.StatusCode.OK, "")
    assert await stored_count(bus) == 2


def job(parallelism: int) -> dict[str, Any]:
    """A Job asking for no quota: any ClusterQueue admits it, however many pods it has."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "many", "namespace": "ns", "labels": {QUEUE_NAME_KEY: "q"}},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        },
    }


async def test_a_workload_of_more_than_100000_pods_is_refused_naming_the_field(
    gw: RunningGateway, bus: Bus
) -> None:
    # Admitted, a Job of parallelism 1 000 000 had the binder and gang-permit make its pods at
    # once: 2-3 GB each, killed by their liveness probe, and again after each restart.
    bad = grpc.StatusCode.INVALID_ARGUMENT
    two_podsets = workload("w", count=60_000)
    two_podsets["spec"]["podSets"].append({**two_podsets["spec"]["podSets"][0], "name": "b"})

    assert await submit(gw, job(1_000_000)) == (
        bad,
        "Job/ns/many: spec.parallelism: must be at most 100000 (pods in one workload), got 1000000",
    )
    assert await submit(gw, two_podsets) == (
        bad,
        "Workload/ns/w: spec.podSets: must ask for at most 100000 pods in all"
        " (podsets' count), got 120000",
    )
    assert await stored_count(bus) == 0
    assert await submit(gw, job(100_000)) == (grpc.StatusCode.OK, "")
