"""Heartbeats of many nodes put in MUSTER_CLUSTERS as a cluster's gang-permit puts them
(in parts when over the server's max_payload), without running a cluster of that size."""

from __future__ import annotations

from muster.bus import Bus
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat_parts import encode_room
from muster.gangpermit.room_writer import RoomWriter

GIB = 1024**3


def room(i: int, *, prefix: str = "node", labels: int = 2) -> NodeRoom:
    """Node `i`: 8 cpu and 32 GiB, of which i % 8 cpu are taken; `labels` labels of its own."""
    return NodeRoom(
        name=f"{prefix}-{i:05d}",
        labels={f"example.com/label-{j}": f"{prefix}-{i}-value-{j}" for j in range(labels)},
        allocatable={"cpu": 8_000, "memory": 32 * GIB * 1000, "pods": 110_000},
        free={"cpu": 8_000 - (i % 8) * 1000, "memory": 32 * GIB * 1000, "pods": 110_000},
    )


async def report(bus: Bus, cluster: str, nodes: list[NodeRoom], *, unreachable: str = "") -> None:
    """Put `cluster`'s heartbeat with `nodes` (or, `unreachable`, none and why)."""
    kv = await bus.kv("MUSTER_CLUSTERS")
    reason = "ClientConnectionFailed" if unreachable else ""
    capacity = ClusterCapacity(
        cluster=cluster, nodes=tuple(nodes), unreachable=unreachable, reason=reason
    )
    await RoomWriter(cluster).write(kv, encode_room(capacity, max_bytes=bus.nc.max_payload))
