"""Visibility.Clusters: each cluster's nodes as its gang-permit last reported them, with pods.

The room comes from the `MUSTER_CLUSTERS` heartbeats (written by gangpermit, read by
admission's MultiKueue dispatch); the pods on each node from the workload book (their
`bound` events). A cluster whose heartbeat is older than SILENT_AFTER_S is Silent: admission
counts it lost after its `--cluster-lost-seconds` (10 by default). One whose heartbeat says why
it takes no dispatched work (its API server does not answer, its room is too large to report)
is Unavailable, with that reason and message. A room in parts (`muster.core.heartbeat_parts`)
is read whole: a read that met parts of two heartbeats is read again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Final

import msgspec

from muster.api import quantities_to_strings
from muster.bus.kv import Bucket
from muster.contracts.v1 import events_pb2, services_pb2
from muster.core.dispatch import ClusterCapacity
from muster.core.heartbeat_parts import RoomReader, part_key, parts_named, read_rooms
from muster.gateway.book import FINISHED, WorkloadBook

CLUSTERS_BUCKET: Final = "MUSTER_CLUSTERS"
SILENT_AFTER_S: Final = 10.0


READS: Final = 3  # reads of the bucket before a room whose parts keep changing is shown empty


async def heartbeats(kv: Bucket) -> dict[str, tuple[ClusterCapacity, float]]:
    """cluster -> (its room as last reported, its heartbeat's age in seconds); a bad
    heartbeat's room is empty."""
    for _ in range(READS):
        found = await kv.snapshot()
        now = time.time()
        rooms = read_rooms({key: entry.value or b"" for key, entry in found.items()})
        if not rooms.torn:
            break  # else parts of the next heartbeat came between a head and its own
    shown = {c: ClusterCapacity(cluster=c) for c in [*rooms.bad, *rooms.torn]} | rooms.whole
    return {
        cluster: (room, max(0.0, now - entry.created) if entry.created else 0.0)
        for cluster, room in shown.items()
        if (entry := found.get(cluster)) is not None
    }


async def room_of(kv: Bucket, cluster: str) -> ClusterCapacity | None:
    """`cluster`'s room as last reported, read key by key (no consumer, unlike `heartbeats`:
    for polling); None when none is whole (not reported, bad, or its parts keep changing)."""
    for _ in range(READS):
        head = await kv.get(cluster)
        if head is None or head.value is None:
            return None
        reader = RoomReader()
        try:
            for n in range(parts_named(head.value)):
                part = await kv.get(part_key(cluster, n))
                reader.heard(part_key(cluster, n), None if part is None else part.value)
            found = reader.heard(cluster, head.value)
        except msgspec.DecodeError:
            return None
        if isinstance(found, ClusterCapacity):
            return found
    return None


def clusters_view(
    reported: Mapping[str, tuple[ClusterCapacity, float]], book: WorkloadBook
) -> services_pb2.ClustersResponse:
    """The answer: clusters by name, nodes by name, each with the pods bound there."""
    pods: dict[tuple[str, str], list[tuple[events_pb2.PodBinding, str]]] = {}
    for entry in book:
        if entry.summary.status == FINISHED:
            continue
        for binding in entry.pods.values():
            pods.setdefault((entry.summary.cluster, binding.node), []).append((binding, entry.key))
    out = services_pb2.ClustersResponse()
    for name in sorted(reported):
        capacity, age = reported[name]
        view = out.clusters.add(
            name=name,
            heartbeat_age_seconds=round(age, 1),
            state=_state(capacity, age),
            reason=capacity.reason,
            message=capacity.unreachable,
        )
        for node in sorted(capacity.nodes, key=lambda n: n.name):
            here = sorted(pods.get((name, node.name), []), key=lambda p: p[0].pod.name)
            view.nodes.add(
                name=node.name,
                labels=dict(node.labels),
                allocatable=quantities_to_strings(node.allocatable),
                free=quantities_to_strings(node.free),
                pods=[binding for binding, _ in here],
                workloads=sorted({key for _, key in here}),
            )
    return out


def _state(capacity: ClusterCapacity, age: float) -> str:
    if age >= SILENT_AFTER_S:
        return "Silent"
    return "Unavailable" if capacity.unreachable else "Ready"
