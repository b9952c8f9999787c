"""Gateway.Submit of ClusterQueues past Kueue's list limits (16 resource groups, 64 covered
resources and 64 flavors in each), against a real nats-server: INVALID_ARGUMENT naming the
field, nothing stored; the largest Kueue takes is taken."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
import yaml
from admission_world import cluster_queue
from gateway_helpers import RunningGateway, running_gateway, stored_count

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
