"""Visibility.QueueStatus and PendingWorkloads read what admission wrote to MUSTER_VISIBILITY."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from gateway_helpers import RunningGateway, running_gateway

from muster.bus import Bus
from muster.bus.buckets import VISIBILITY_BUCKET
from muster.contracts.v1 import events_pb2, services_pb2

pytestmark = pytest.mark.timeout(60)


def cluster_queue(name: str, *, pending: int) -> events_pb2.ClusterQueueStatus:
    cpu = events_pb2.ResourceStatus(name="cpu", nominal="10", reserved="4", used="2", available="6")
    return events_pb2.ClusterQueueStatus(
        name=name,
        cohort="shared",
        active=True,
        pending_workloads=pending,
        flavors=[events_pb2.FlavorStatus(name="default", resources=[cpu])],
    )


def pending_list(cq: str, names: list[tuple[str, str]]) -> services_pb2.PendingWorkloadsResponse:
    items = [
        services_pb2.PendingWorkload(
            namespace="ml",
            name=name,
            local_queue=lq,
            cluster_queue=cq,
            position_in_cluster_queue=i,
            position_in_local_queue=[n for n, q in names if q == lq].index(name),
        )
        for i, (name, lq) in enumerate(names)
    ]
    return services_pb2.PendingWorkloadsResponse(items=items, total=len(items))


@pytest.fixture
async def gw(bus: Bus) -> AsyncIterator[RunningGateway]:
    kv = await bus.kv(VISIBILITY_BUCKET)
    await kv.put("cq.team-a", cluster_queue("team-a", pending=3).SerializeToString())
    await kv.put("cq.team-b", cluster_queue("team-b", pending=0).SerializeToString())
    lq = events_pb2.LocalQueueStatus(namespace="ml", name="main", cluster_queue="team-a")
    await kv.put("lq.ml.main", lq.SerializeToString())
    waiting = pending_list("team-a", [("w1", "main"), ("w2", "other"), ("w3", "main")])
    await kv.put("pending.team-a", waiting.SerializeToString())
    async with running_gateway(bus) as running:
        yield running


async def test_queue_status_returns_what_admission_wrote(gw: RunningGateway) -> None:
    reply = await gw.visibility.QueueStatus(services_pb2.QueueStatusRequest(), timeout=10)

    assert [cq.name for cq in reply.cluster_queues] == ["team-a", "team-b"]
    assert reply.cluster_queues[0] == cluster_queue("team-a", pending=3)
    assert [(lq.namespace, lq.name, lq.cluster_queue) for lq in reply.local_queues] == [
        ("ml", "main", "team-a")
    ]


async def test_queue_status_of_an_unknown_cluster_queue_is_not_found(gw: RunningGateway) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.visibility.QueueStatus(services_pb2.QueueStatusRequest(cluster_queue="nope"))

    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == 'ClusterQueue "nope" not found'


async def test_pending_workloads_pages_a_cluster_queue(gw: RunningGateway) -> None:
    request = services_pb2.PendingWorkloadsRequest(cluster_queue="team-a", offset=1, limit=5)

    reply = await gw.visibility.PendingWorkloads(request, timeout=10)

    assert [(w.name, w.position_in_cluster_queue) for w in reply.items] == [("w2", 1), ("w3", 2)]
    assert reply.total == 3


async def test_pending_workloads_of_a_local_queue(gw: RunningGateway) -> None:
    request = services_pb2.PendingWorkloadsRequest(namespace="ml", local_queue="main")

    reply = await gw.visibility.PendingWorkloads(request, timeout=10)

    assert [(w.name, w.position_in_local_queue) for w in reply.items] == [("w1", 0), ("w3", 1)]


@pytest.mark.parametrize(
    ("request_", "code", "details"),
    [
        pytest.param(
            services_pb2.PendingWorkloadsRequest(cluster_queue="nope"),
            grpc.StatusCode.NOT_FOUND,
            'ClusterQueue "nope" not found',
            id="unknown",
        ),
        pytest.param(
            services_pb2.PendingWorkloadsRequest(cluster_queue="team-a", limit=1001),
            grpc.StatusCode.INVALID_ARGUMENT,
            "limit: must be between 0 and 1000, got 1001",
            id="limit",
        ),
    ],
)
async def test_pending_workloads_errors(
    gw: RunningGateway,
    request_: services_pb2.PendingWorkloadsRequest,
    code: grpc.StatusCode,
    details: str,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.visibility.PendingWorkloads(request_, timeout=10)

    assert (caught.value.code(), caught.value.details()) == (code, details)


async def test_deleted_entries_are_gone(gw: RunningGateway, bus: Bus) -> None:
    kv = await bus.kv(VISIBILITY_BUCKET)
    await kv.delete("cq.team-b")

    reply = await gw.visibility.QueueStatus(services_pb2.QueueStatusRequest(), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.visibility.QueueStatus(services_pb2.QueueStatusRequest(cluster_queue="team-b"))

    assert [cq.name for cq in reply.cluster_queues] == ["team-a"]
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
