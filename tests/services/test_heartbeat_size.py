"""A worker cluster whose room does not fit in one NATS message (max_payload) says so: the
gateway's cluster listing shows it Unavailable with reason RoomTooLarge and both sizes, where it
used to show nothing (the put failed, and admission took the cluster for lost).

A real nats-server with a small max_payload; a simulated cluster whose nodes each carry their
own labels (nothing for the heartbeat's tables to share).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admission_world import eventually
from gateway_helpers import running_gateway
from multicluster_stack import sim_clusters
from nats_process import NatsServer

from muster.bus import Bus
from muster.bus.natsconf import server_config
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)

MAX_PAYLOAD = 16 * 1024
NODES = 40  # 20 labels of their own each: about 40 KB of room to report


@pytest.fixture
def nats_process(tmp_path: Path) -> Iterator[NatsServer]:
    block = f"max_payload: {MAX_PAYLOAD}\n"
    config = server_config(port=-1, store_dir=str(tmp_path / "js"), authorization_block=block)
    server = NatsServer(tmp_path / "nats", config=config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def labeled_node(i: int) -> dict[str, Any]:
    labels = {f"example.com/label-{j}": f"node-{i}-value-{j}" for j in range(20)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"east-{i}", "labels": labels},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


async def test_a_cluster_too_large_to_report_says_why_in_the_cluster_listing(bus: Bus) -> None:
    async with sim_clusters(bus, "east") as clusters, running_gateway(bus) as gateway:
        for i in range(NODES):
            await clusters["east"].backend.apply(labeled_node(i))
        found: list[services_pb2.ClusterView] = []

        async def listed_too_large() -> bool:  # after "Syncing", while it reads the cluster
            answer = await gateway.visibility.Clusters(services_pb2.ClustersRequest())
            found[:] = [c for c in answer.clusters if c.name == "east"]
            return bool(found) and found[0].reason == "RoomTooLarge"

        await eventually(listed_too_large)
        (east,) = found
        assert east.state == "Unavailable"
        assert f"nodes) is over the {MAX_PAYLOAD} bytes NATS takes" in east.message
        assert f"({NODES} nodes)" in east.message
        assert list(east.nodes) == []
