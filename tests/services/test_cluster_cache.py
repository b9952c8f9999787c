"""Visibility.Clusters answered from the gateway's cache (`muster.gateway.cluster_cache`) follows
the bucket: a changed part, a cluster removed, a cluster whose heartbeat grows from one value
to several parts and shrinks back. Heartbeats are put by gang-permit's writer on a real
nats-server; each answer is compared with what was reported last."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import msgspec
import pytest
from cluster_rooms import room
from gateway_helpers import RunningGateway, running_gateway

from muster.api.quantity import parse_quantity
from muster.bus import Bus
from muster.contracts.v1 import services_pb2
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat_parts import Heartbeat, encode_room, part_key
from muster.gangpermit.room_writer import RoomWriter
from muster.gateway.node_pages import continue_token

pytestmark = pytest.mark.timeout(90)

SPLIT = 1_500  # nodes of 30 labels each: about 2 MB, several parts at the default max_payload


@pytest.fixture
async def gateway(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus) as gw:
        yield gw


class Reporter:
    """One cluster's gang-permit, as far as its heartbeats go: the writer and the last one."""

    def __init__(self, bus: Bus, cluster: str) -> None:
        self.bus, self.cluster = bus, cluster
        self.writer = RoomWriter(cluster)
        self.last: Heartbeat | None = None

    async def report(self, nodes: tuple[NodeRoom, ...]) -> int:
        """Put a heartbeat with `nodes`; the values put (parts that changed, and the head)."""
        capacity = ClusterCapacity(cluster=self.cluster, nodes=nodes)
        self.last = encode_room(capacity, max_bytes=self.bus.nc.max_payload, last=self.last)
        return await self.writer.write(await self.bus.kv("MUSTER_CLUSTERS"), self.last)

    def parts(self) -> int:
        """How many parts the last heartbeat was put in (0: one value)."""
        return 0 if self.last is None else len(self.last.parts)


Request = services_pb2.ClustersRequest


async def summary(gateway: RunningGateway) -> dict[str, tuple[int, int]]:
    """cluster -> (node count, free cpu in millicores) as the gateway answers."""
    answer = await gateway.visibility.Clusters(Request(without_nodes=True))
    return {
        c.name: (c.node_count, parse_quantity(c.free_total.get("cpu", "0")))
        for c in answer.clusters
    }


async def free_cpu_after(gateway: RunningGateway, cluster: str, node: str) -> tuple[str, str]:
    """The node after `node`, and its free cpu: a page of one node."""
    token = continue_token(cluster, (cluster, node))
    asked = Request(cluster=cluster, limit=1, continue_token=token)
    (view,) = (await gateway.visibility.Clusters(asked)).clusters
    (found,) = view.nodes
    return found.name, found.free["cpu"]


def free_cpu(nodes: tuple[NodeRoom, ...]) -> int:
    return sum(n.free["cpu"] for n in nodes)


def big_nodes(count: int, *, prefix: str = "big") -> tuple[NodeRoom, ...]:
    return tuple(room(i, prefix=prefix, labels=30) for i in range(count))


async def test_a_changed_part_is_answered_at_the_next_call_and_the_rest_unchanged(
    bus: Bus, gateway: RunningGateway
) -> None:
    big = Reporter(bus, "big")
    nodes = big_nodes(SPLIT)
    await big.report(nodes)
    assert big.parts() > 2
    assert await summary(gateway) == {"big": (SPLIT, free_cpu(nodes))}

    changed = SPLIT // 2
    busy = msgspec.structs.replace(nodes[changed], free={**nodes[changed].free, "cpu": 0})
    nodes = (*nodes[:changed], busy, *nodes[changed + 1 :])
    assert await big.report(nodes) == 2  # one part, then the head

    assert await summary(gateway) == {"big": (SPLIT, free_cpu(nodes))}
    assert await free_cpu_after(gateway, "big", nodes[changed - 1].name) == (busy.name, "0")
    after = nodes[changed + 1]
    assert await free_cpu_after(gateway, "big", busy.name) == (
        after.name,
        str(after.free["cpu"] // 1000),
    )
    assert await big.report(nodes) == 1  # idle: the head alone, the same answer
    assert await summary(gateway) == {"big": (SPLIT, free_cpu(nodes))}


async def test_a_removed_cluster_leaves_the_answer_and_is_not_found(
    bus: Bus, gateway: RunningGateway
) -> None:
    big, small = Reporter(bus, "big"), Reporter(bus, "small")
    await big.report(big_nodes(SPLIT))
    await small.report(big_nodes(3, prefix="small"))
    assert set(await summary(gateway)) == {"big", "small"}

    kv = await bus.kv("MUSTER_CLUSTERS")
    await kv.delete("big")
    for n in range(big.parts()):
        await kv.delete(part_key("big", n))

    assert set(await summary(gateway)) == {"small"}
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await gateway.visibility.Clusters(Request(cluster="big"))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND

    # Back with the same name: read afresh, not from what was held of it.
    again = Reporter(bus, "big")
    await again.report(big_nodes(5))
    assert (await summary(gateway))["big"] == (5, free_cpu(big_nodes(5)))


async def test_a_heartbeat_grown_from_one_value_to_parts_and_back_is_read_whole(
    bus: Bus, gateway: RunningGateway
) -> None:
    east = Reporter(bus, "east")
    await east.report(big_nodes(10, prefix="east"))
    assert east.parts() == 0
    assert await summary(gateway) == {"east": (10, free_cpu(big_nodes(10, prefix="east")))}

    grown = big_nodes(SPLIT, prefix="east")
    await east.report(grown)
    assert east.parts() > 1
    assert await summary(gateway) == {"east": (SPLIT, free_cpu(grown))}
    whole = [
        n.name
        for page in [await gateway.visibility.Clusters(Request(cluster="east", limit=10_000))]
        for c in page.clusters
        for n in c.nodes
    ]
    assert whole[:2] == ["east-00000", "east-00001"]

    shrunk = big_nodes(4, prefix="east")
    await east.report(shrunk)
    assert east.parts() == 0
    assert await summary(gateway) == {"east": (4, free_cpu(shrunk))}
