"""Visibility.Clusters for clusters too large for one answer: totals without nodes, one
cluster, nodes in pages (`limit`, `continue_token`), and every node only when the answer fits
in the 4 MiB a gRPC client receives by default. A gateway on a real nats-server, reading
heartbeats put as gang-permit puts them (a large one in parts)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from cluster_rooms import report, room
from gateway_helpers import RunningGateway, running_gateway

from muster.api.quantity import parse_quantity
from muster.bus import Bus
from muster.contracts.v1 import services_pb2
from muster.gateway.node_pages import continue_token

pytestmark = pytest.mark.timeout(90)

EAST, WEST = 45, 3
DEFAULT_RECEIVE = 4 * 1024 * 1024  # what a gRPC client receives by default
INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
LARGE = 4_000  # nodes of 30 labels each: about 5 MB as one answer


@pytest.fixture
async def gateway(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus) as gw:
        yield gw


Request = services_pb2.ClustersRequest


async def clusters(
    gateway: RunningGateway, request: Request | None = None
) -> services_pb2.ClustersResponse:
    answer: services_pb2.ClustersResponse = await gateway.visibility.Clusters(request or Request())
    return answer


async def refusal(gateway: RunningGateway, request: Request) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await clusters(gateway, request)
    return caught.value


async def every_page(
    gateway: RunningGateway, *, limit: int, cluster: str = ""
) -> list[services_pb2.ClustersResponse]:
    pages = [await clusters(gateway, Request(cluster=cluster, limit=limit))]
    while token := pages[-1].continue_token:
        asked = Request(cluster=cluster, limit=limit, continue_token=token)
        pages.append(await clusters(gateway, asked))
    return pages


def nodes_of(pages: list[services_pb2.ClustersResponse]) -> list[tuple[str, str]]:
    return [(c.name, n.name) for page in pages for c in page.clusters for n in c.nodes]


async def three_clusters(bus: Bus) -> None:
    await report(bus, "east", [room(i, prefix="east") for i in range(EAST)])
    await report(bus, "west", [room(i, prefix="west") for i in range(WEST)])
    await report(bus, "gone", [], unreachable="dial tcp: connection refused")


async def test_pages_list_every_node_once_in_order_with_every_cluster_on_each(
    bus: Bus, gateway: RunningGateway
) -> None:
    await three_clusters(bus)
    pages = await every_page(gateway, limit=7)

    listed = nodes_of(pages)
    whole = nodes_of([await clusters(gateway)])  # 48 small nodes: the whole answer fits
    assert listed == whole == sorted(whole)
    assert len(set(listed)) == EAST + WEST
    assert len(pages) == -(-(EAST + WEST) // 7)
    for page in pages:
        assert [c.name for c in page.clusters] == ["east", "gone", "west"]
        assert sum(len(c.nodes) for c in page.clusters) <= 7
    assert [p.remaining_node_count for p in pages] == [max(0, 48 - 7 * n) for n in range(1, 8)]

    east = await every_page(gateway, limit=10, cluster="east")
    assert nodes_of(east) == [n for n in whole if n[0] == "east"]
    assert {c.name for page in east for c in page.clusters} == {"east"}


async def test_totals_without_nodes_are_the_sums_of_the_nodes(
    bus: Bus, gateway: RunningGateway
) -> None:
    await three_clusters(bus)
    summary = await clusters(gateway, Request(without_nodes=True))
    nodes = {c.name: list(c.nodes) for c in (await clusters(gateway)).clusters}

    for view in summary.clusters:
        assert list(view.nodes) == []
        assert view.node_count == len(nodes[view.name])
        for total, of_node in ((view.allocatable_total, "allocatable"), (view.free_total, "free")):
            sums: dict[str, int] = {}
            for node in nodes[view.name]:
                for resource, value in getattr(node, of_node).items():
                    sums[resource] = sums.get(resource, 0) + parse_quantity(value)
            assert {r: parse_quantity(v) for r, v in total.items()} == sums
    east = next(c for c in summary.clusters if c.name == "east")
    assert east.free_total["cpu"] == str(sum(8 - i % 8 for i in range(EAST)))
    gone = next(c for c in summary.clusters if c.name == "gone")
    assert (gone.state, gone.reason) == ("Unavailable", "ClientConnectionFailed")
    assert gone.node_count == 0


async def test_a_cluster_past_what_clients_receive_is_refused_whole_and_served_in_pages(
    bus: Bus, gateway: RunningGateway
) -> None:
    await report(bus, "big", [room(i, prefix="big", labels=30) for i in range(LARGE)])

    refused = await refusal(gateway, Request())
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"all {LARGE} nodes" in (refused.details() or "")
    assert "without_nodes" in (refused.details() or "")
    assert "limit" in (refused.details() or "")

    (big,) = (await clusters(gateway, Request(without_nodes=True))).clusters
    assert big.node_count == LARGE
    assert big.allocatable_total["cpu"] == str(8 * LARGE)

    # The largest limit still gets pages a default client receives: they end by size too.
    pages = await every_page(gateway, limit=10_000, cluster="big")
    assert len(pages) == 2
    assert all(page.ByteSize() < DEFAULT_RECEIVE for page in pages)
    assert nodes_of(pages) == [("big", f"big-{i:05d}") for i in range(LARGE)]


async def test_hostile_requests_get_errors_naming_the_field(
    bus: Bus, gateway: RunningGateway
) -> None:
    await three_clusters(bus)
    cases: list[tuple[Request, grpc.StatusCode, str]] = [
        (Request(limit=-1), INVALID, "limit: must be from 0 to 10000, got -1"),
        (Request(limit=2**62), INVALID, "limit: must be from 0 to 10000"),
        (Request(continue_token="garbage!"), INVALID, "continue_token: not a token"),
        (Request(continue_token="x" * 100_000), INVALID, "continue_token: not a token"),
        (
            Request(cluster="west", continue_token=continue_token("east", ("east", "east-00003"))),
            INVALID,
            "continue_token: was given for cluster 'east'",
        ),
        (Request(without_nodes=True, limit=5), INVALID, "limit: pages nodes"),
        (Request(cluster="north"), NOT_FOUND, "cluster: 'north' has no heartbeat"),
        (Request(cluster="n" * 5_000), INVALID, "cluster: must be no more than 253 characters"),
    ]
    for asked, code, message in cases:
        refused = await refusal(gateway, asked)
        assert (refused.code(), message in (refused.details() or "")) == (code, True), asked
