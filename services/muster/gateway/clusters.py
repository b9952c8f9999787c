"""Visibility.Clusters: each cluster's nodes as its gang-permit last reported them, with pods.

The room comes from the `MUSTER_CLUSTERS` heartbeats (written by gangpermit, read by
admission's MultiKueue dispatch); the pods on each node from the workload book (their
`bound` events). A cluster whose heartbeat is older than SILENT_AFTER_S is Silent: admission
counts it lost after its `--cluster-lost-seconds` (10 by default). One whose heartbeat says why
it takes no dispatched work (its API server does not answer, its room is too large to report)
is Unavailable, with that reason and message.
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
from muster.core.heartbeat import decode_heartbeat
from muster.gateway.book import FINISHED, WorkloadBook

CLUSTERS_BUCKET: Final = "MUSTER_CLUSTERS"
SILENT_AFTER_S: Final = 10.0


async def heartbeats(kv: Bucket) -> dict[str, tuple[bytes, float]]:
    """cluster -> (its last heartbeat, its age in seconds)."""
    found = await kv.snapshot()
    now = time.time()
    return {
        key: (entry.value or b"", max(0.0, now - entry.created) if entry.created else 0.0)
        for key, entry in found.items()
    }


def clusters_view(
    reported: Mapping[str, tuple[bytes, float]], book: WorkloadBook
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
        data, age = reported[name]
        try:
            capacity = decode_heartbeat(data)
        except msgspec.DecodeError:
            capacity = ClusterCapacity(cluster=name)
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
