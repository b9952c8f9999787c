"""A worker cluster that claims room it cannot have, beside an honest one: its heartbeat is
refused by dispatch, naming the cluster and the node, and the work goes to the honest cluster
(the gateway's cluster view, which the dashboard's cluster page shows, says it is refused
and why, instead of the room claimed). A real nats-server,
admission and the gateway; the configuration and the workload go in as YAML through the
gateway, heartbeats as a worker's gang-permit puts them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from admission_world import eventually, start_admission
from bus_helpers import EventLog
from cluster_rooms import report, room
from gateway_helpers import running_gateway
from multicluster_stack import job, multikueue_config, wait_for, watchers

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.core.dispatch import NodeRoom

pytestmark = pytest.mark.timeout(60)

NEVER_LOST_S = 60.0  # no cluster here goes silent on purpose
PLENTY = 10**15  # milli-cpu: a trillion cores


async def test_a_worker_claiming_more_free_room_than_its_nodes_have_gets_no_work(
    bus: Bus, bus_config: BusConfig, events: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    # west, listed first, says its one node of 8 cpu has a trillion free: believed, it is the
    # first listed with room and the one with the most left (a share of free room far over
    # 100%), so it wins every dispatch, first-fit or best-fit.
    await report(bus, "west", [lying_node()])
    await report(bus, "east", [room(0, prefix="east")])

    caplog.set_level(logging.WARNING)
    async with dispatching(bus, bus_config, ["west", "east"]) as submit:
        await submit(services_pb2.SubmitRequest(manifest=job("train", pods=2)))

        admitted = await wait_for(events, "admitted", "ml/train")
        assert admitted.cluster == "east"

        # The manager says whose room it refused, and why.
        said = (
            "node 'west-00000' of cluster 'west': free cpu 1000000000000000 is more than "
            "its allocatable 8000"
        )
        refused = [r.getMessage() for r in caplog.records]
        assert any("bad heartbeat west" in m and said in m for m in refused), refused


def lying_node() -> NodeRoom:
    """west's one node of 8 cpu, claiming a trillion free."""
    honest = room(0, prefix="west")
    return NodeRoom(
        name="west-00000",
        labels=honest.labels,
        allocatable=honest.allocatable,
        free={**honest.free, "cpu": PLENTY},
    )


async def test_the_cluster_view_shows_a_lying_room_refused_naming_the_cluster_and_node(
    bus: Bus,
) -> None:
    # Shown as reported (as before), west is Ready with a trillion cpu free: what an operator
    # would take for the place with room.
    await report(bus, "west", [lying_node()])
    await report(bus, "east", [room(0, prefix="east")])

    async with running_gateway(bus) as gateway:
        visibility = services_pb2_grpc.VisibilityStub(gateway.channel)
        shown = await visibility.Clusters(services_pb2.ClustersRequest())

    views = {c.name: c for c in shown.clusters}
    assert (views["east"].state, views["east"].node_count) == ("Ready", 1)
    west = views["west"]
    assert (west.state, west.reason, west.node_count) == ("Refused", "HeartbeatRefused", 0)
    assert dict(west.free_total) == {}
    assert west.message == (
        "bad heartbeat west: node 'west-00000' of cluster 'west': free cpu 1000000000000000 is "
        "more than its allocatable 8000 (a room no node has: the heartbeat is refused)"
    )


@contextlib.asynccontextmanager
async def dispatching(
    bus: Bus, bus_config: BusConfig, clusters: list[str]
) -> AsyncIterator[Callable[[services_pb2.SubmitRequest], Awaitable[object]]]:
    """The gateway's Submit, once admission dispatches to `clusters` (in that order) and has
    read the stored heartbeats."""
    async with running_gateway(bus) as gateway:
        admission = await start_admission(bus_config, cluster_lost_s=NEVER_LOST_S)
        try:
            await admission.wait_serving()
            manifest = multikueue_config(*clusters, cpu=8)
            await gateway.gateway.Submit(services_pb2.SubmitRequest(manifest=manifest))

            async def registry_followed() -> bool:
                return await watchers(bus) >= 1

            await eventually(registry_followed)
            yield gateway.gateway.Submit
        finally:
            await admission.stop()
