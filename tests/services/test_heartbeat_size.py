"""A worker cluster whose room does not fit in one NATS message (max_payload) reports it in
parts: the gateway's cluster listing shows every node, and MultiKueue dispatches there, where
before the heartbeat said only RoomTooLarge. A room beyond even the parts (over MAX_PARTS
messages) still says so.

A real nats-server with a small max_payload; simulated clusters whose nodes each carry their
own labels (nothing for the heartbeat's tables to share).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from admission_world import Running, eventually, start_admission
from bus_helpers import EventLog
from gateway_helpers import RunningGateway, running_gateway
from multicluster_stack import (
    SimCluster,
    job,
    multikueue_config,
    node,
    reported,
    sim_clusters,
    wait_for,
)
from nats_process import NatsServer, configured_nats

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import services_pb2
from muster.core.heartbeat_parts import MAX_PARTS, parts_pattern

pytestmark = pytest.mark.timeout(90)

MAX_PAYLOAD = 16 * 1024
NODES = 40  # 20 labels of their own each: about 40 KB of room to report, in several parts
ABSURD_NODES = 600  # about 600 KB: over MAX_PARTS parts of half a message


@pytest.fixture
def nats_process(tmp_path: Path) -> Iterator[NatsServer]:
    with configured_nats(tmp_path, block=f"max_payload: {MAX_PAYLOAD}\n") as server:
        yield server


def labeled_node(i: int, *, labels: int = 20) -> dict[str, Any]:
    own = {f"example.com/label-{j}": f"node-{i}-value-{j}" for j in range(labels)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"east-{i}", "labels": own},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


@pytest.fixture
async def clusters(bus: Bus) -> AsyncIterator[tuple[dict[str, SimCluster], RunningGateway]]:
    async with sim_clusters(bus, "east", "west") as clusters, running_gateway(bus) as gateway:
        yield clusters, gateway


async def listed(gateway: RunningGateway, name: str) -> services_pb2.ClusterView | None:
    answer = await gateway.visibility.Clusters(services_pb2.ClustersRequest())
    return next((c for c in answer.clusters if c.name == name), None)


async def test_a_room_over_max_payload_is_reported_in_parts_and_work_is_dispatched_there(
    bus: Bus,
    bus_config: BusConfig,
    events: EventLog,
    clusters: tuple[dict[str, SimCluster], RunningGateway],
) -> None:
    workers, gateway = clusters
    admission: Running = await start_admission(bus_config, cluster_lost_s=60.0)
    try:
        await admission.wait_serving()
        await workers["west"].backend.apply(node("west-1", cpu="2"))
        for i in range(NODES):
            await workers["east"].backend.apply(labeled_node(i))
        await reported(bus, "west", "west-1")
        await reported(bus, "east", *(f"east-{i}" for i in range(NODES)))
        kv = await bus.kv("MUSTER_CLUSTERS")
        assert len(await kv.snapshot(parts_pattern("east"))) > 1  # it did not fit in one

        east = await listed(gateway, "east")
        assert east is not None
        assert (east.state, east.reason) == ("Ready", "")
        assert len(east.nodes) == NODES
        assert east.nodes[0].labels["example.com/label-0"].startswith("node-")

        # West comes first but has 2 cpu: only east's room, known from its parts, takes it.
        await gateway.gateway.Submit(
            services_pb2.SubmitRequest(manifest=multikueue_config("west", "east", cpu=100))
        )
        await gateway.gateway.Submit(
            services_pb2.SubmitRequest(manifest=job("big", pods=2, cpu="6"))
        )
        assert (await wait_for(events, "admitted", "ml/big")).cluster == "east"
        await wait_for(events, "running", "ml/big", cluster="east")
    finally:
        await admission.stop()


async def test_a_room_over_every_part_says_why_in_the_cluster_listing(
    clusters: tuple[dict[str, SimCluster], RunningGateway],
) -> None:
    workers, gateway = clusters
    for i in range(ABSURD_NODES):
        await workers["east"].backend.apply(labeled_node(i))
    found: list[services_pb2.ClusterView] = []

    async def listed_too_large() -> bool:  # after "Syncing", while it reads the cluster
        east = await listed(gateway, "east")
        found[:] = [] if east is None else [east]
        return bool(found) and f"({ABSURD_NODES} nodes)" in found[0].message

    await eventually(listed_too_large)
    (east,) = found
    assert (east.state, east.reason) == ("Unavailable", "RoomTooLarge")
    assert f"{MAX_PARTS} messages of the {MAX_PAYLOAD} bytes NATS takes in one" in east.message
    assert list(east.nodes) == []
