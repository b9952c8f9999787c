"""Pending lists of many pages through the services: admission writes pages under stable ids
and their index, the gateway answers a ClusterQueue's and a LocalQueue's pending workloads
with Kueue's positions; and an upgrade from the layout before indexes (pages of positions)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    eventually,
    flavor,
    local_queue,
    publish,
    running,
    start_admission,
    submitted,
    workload,
)
from gateway_helpers import RunningGateway, running_gateway

from muster.bus import Bus, BusConfig
from muster.bus.buckets import VISIBILITY_BUCKET
from muster.contracts.v1 import events_pb2, services_pb2

pytestmark = pytest.mark.timeout(60)

WAITING = 400  # in pages of 32 to 128: several


@pytest.fixture
async def gw(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus) as running:
        yield running


def arrivals() -> list[tuple[str, str, int]]:
    """(name, LocalQueue, priority) in submission order: two queues interleaved unevenly, and
    every seventh workload urgent (it goes ahead of the others, as Kueue orders them)."""
    return [
        (f"w{i:03}", "lq" if i % 3 else "other", 10 if i % 7 == 0 else 0) for i in range(WAITING)
    ]


async def queued(bus: Bus) -> None:
    """A ClusterQueue with no room and `arrivals()` waiting in it."""
    await publish(
        bus,
        config_applied(flavor()),
        config_applied(cluster_queue(cpu="0")),
        config_applied(local_queue("lq")),
        config_applied(local_queue("other")),
    )
    await publish(
        bus,
        *(submitted(workload(n, queue=q, priority=p)) for n, q, p in arrivals()),
    )


async def pending(
    gw: RunningGateway, *, offset: int = 0, limit: int = 1000, local_queue: str = ""
) -> services_pb2.PendingWorkloadsResponse:
    request = services_pb2.PendingWorkloadsRequest(offset=offset, limit=limit)
    if local_queue:
        request.namespace, request.local_queue = "ns", local_queue
    else:
        request.cluster_queue = "cq"
    reply: services_pb2.PendingWorkloadsResponse = await gw.visibility.PendingWorkloads(
        request, timeout=10
    )
    return reply


def rows(reply: services_pb2.PendingWorkloadsResponse) -> list[tuple[str, str, int, int]]:
    return [
        (w.name, w.local_queue, w.position_in_cluster_queue, w.position_in_local_queue)
        for w in reply.items
    ]


def expected() -> list[tuple[str, str, int, int]]:
    """Kueue's order (priority, then arrival) with its positions in the ClusterQueue and in
    each LocalQueue."""
    ordered = sorted(arrivals(), key=lambda a: -a[2])  # stable: arrival order within a priority
    seen: dict[str, int] = {}
    out = []
    for position, (name, queue, _) in enumerate(ordered):
        out.append((name, queue, position, seen.get(queue, 0)))
        seen[queue] = seen.get(queue, 0) + 1
    return out


async def test_a_local_queue_of_many_pages_answers_kueues_positions(
    bus: Bus, bus_config: BusConfig, gw: RunningGateway
) -> None:
    async with running(await start_admission(bus_config)) as (admission,):
        await admission.wait_serving()
        await queued(bus)
        await answers_with_positions(bus, gw)


async def answers_with_positions(bus: Bus, gw: RunningGateway) -> None:

    async def all_written() -> bool:
        try:
            return (await pending(gw)).total == WAITING
        except grpc.aio.AioRpcError as err:  # NOT_FOUND until admission's first write
            if err.code() != grpc.StatusCode.NOT_FOUND:
                raise
            return False

    await eventually(all_written)
    kv = await bus.kv(VISIBILITY_BUCKET)
    index_entry = await kv.get("pending-index.cq")
    assert index_entry is not None
    index = services_pb2.PendingPageIndex.FromString(index_entry.value or b"")
    assert len(index.pages) >= 3

    order = expected()
    assert rows(await pending(gw)) == order
    for queue in ("lq", "other"):
        mine = [row for row in order if row[1] == queue]
        assert rows(await pending(gw, local_queue=queue)) == mine
        middle = await pending(gw, local_queue=queue, offset=60, limit=50)
        assert (rows(middle), middle.total) == (mine[60:110], len(mine))
    page = await pending(gw, offset=150, limit=100)
    assert (rows(page), page.total) == (order[150:250], WAITING)


def legacy_page(items: list[tuple[str, int, int]]) -> bytes:
    """A page as admission wrote it before indexes: positions set."""
    return services_pb2.PendingWorkloadsResponse(
        items=[
            services_pb2.PendingWorkload(
                namespace="ns", name=name, local_queue="lq", cluster_queue="cq",
                position_in_cluster_queue=in_cq, position_in_local_queue=in_lq,
            )
            for name, in_cq, in_lq in items
        ],
        total=len(items),
    ).SerializeToString()  # fmt: skip


async def test_an_upgrade_reads_the_old_layout_until_admission_writes_indexes_and_sweeps_it(
    bus: Bus, bus_config: BusConfig, gw: RunningGateway
) -> None:
    kv = await bus.kv(VISIBILITY_BUCKET)
    status = events_pb2.ClusterQueueStatus(name="cq", active=True, pending_workloads=3)
    await kv.put("cq.cq", status.SerializeToString())
    lq = events_pb2.LocalQueueStatus(namespace="ns", name="lq", cluster_queue="cq")
    await kv.put("lq.ns.lq", lq.SerializeToString())
    await kv.put("pending.cq", legacy_page([("old-a", 0, 0), ("old-b", 1, 1)]))
    await kv.put("pending-from.2.cq", legacy_page([("old-c", 2, 2)]))

    before = await pending(gw, local_queue="lq", offset=1)
    assert (rows(before), before.total) == ([("old-b", "lq", 1, 1), ("old-c", "lq", 2, 2)], 3)

    await publish(
        bus,
        config_applied(flavor()),
        config_applied(cluster_queue(cpu="0")),
        config_applied(local_queue("lq")),
        submitted(workload("new-a")),
        submitted(workload("new-b")),
    )
    async with running(await start_admission(bus_config)) as (admission,):
        await admission.wait_serving()

        async def swept() -> bool:
            return await kv.get("pending.cq") is None and await kv.get("pending-from.2.cq") is None

        await eventually(swept)
        after = await pending(gw, local_queue="lq")
        assert rows(after) == [("new-a", "lq", 0, 0), ("new-b", "lq", 1, 1)]
