"""Visibility.Clusters: each cluster's nodes as its gang-permit last reported them, with pods.

The room comes from the `MUSTER_CLUSTERS` heartbeats (written by gangpermit, read by
admission's MultiKueue dispatch); the pods on each node from the workload book (their
`bound` events). A cluster whose heartbeat is older than SILENT_AFTER_S is Silent: admission
counts it lost after its `--cluster-lost-seconds` (10 by default). One whose heartbeat says why
it takes no dispatched work (its API server does not answer, its room is too large to report)
is Unavailable, with that reason and message. One whose heartbeat admission refuses (it does
not decode, or claims a room no node has: `muster.core.heartbeat.refuse_impossible`) is
Refused, with no nodes, reason HeartbeatRefused and a message naming the cluster and node.
The rooms are the gateway's cache's (`cluster_cache`: what changed since the last call is
decoded, nothing else); a room in parts is read whole: a read that met parts of two heartbeats
is read again.

A 50 000-node cluster's nodes are many MB, past what gRPC clients receive by default (4 MiB):
a request selects one cluster, asks for totals without nodes, or pages nodes (`node_pages`);
one that asks for every node gets them only when they fit.
"""

from __future__ import annotations

import bisect
from typing import Final

import msgspec

from muster.api import quantities_to_strings
from muster.bus.kv import Bucket
from muster.contracts.v1 import events_pb2, services_pb2
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import HEARTBEAT_REFUSED
from muster.core.heartbeat_parts import RoomReader, part_key, parts_named
from muster.gateway.book import FINISHED, WorkloadBook
from muster.gateway.cluster_cache import READS, ClusterRoom, Reported
from muster.gateway.node_pages import EVERYTHING, NodeQuery, continue_token

SILENT_AFTER_S: Final = 10.0
# The largest answer: under the 4 MiB a gRPC client receives by default, with room for framing.
MAX_ANSWER_BYTES: Final = 4 * 1024 * 1024 - 64 * 1024


async def room_of(kv: Bucket, cluster: str) -> ClusterCapacity | None:
    """`cluster`'s room as last reported, read key by key (no consumer, unlike the gateway's
    `ClusterRooms`: for polling); None when none is whole (not reported, bad, or its parts
    keep changing)."""
    for _ in range(READS):
        head = await kv.get(cluster)
        if head is None or head.value is None:
            return None
        reader = RoomReader()
        try:
            for n in range(parts_named(head.value, cluster=cluster)):
                part = await kv.get(part_key(cluster, n))
                reader.heard(part_key(cluster, n), None if part is None else part.value)
            found = reader.heard(cluster, head.value)
        except msgspec.DecodeError:
            return None
        if isinstance(found, ClusterCapacity):
            return found
    return None


class ClusterNotFoundError(LookupError):
    """The request names a cluster that has no heartbeat (NOT_FOUND); str() says which."""


class AnswerTooLargeError(Exception):
    """Every node would not fit in one answer (RESOURCE_EXHAUSTED); str() says what to ask."""


def clusters_view(
    reported: Reported,
    book: WorkloadBook,
    query: NodeQuery = EVERYTHING,
    *,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> services_pb2.ClustersResponse:
    """The answer: the clusters `query` selects by name, each with its state, node count and
    totals, and the page of their nodes it asks for (by name, each with the pods bound there).

    A page ends after `query.limit` nodes, or before the node that would take the answer past
    `max_bytes` (it holds one node at least); without a limit, that raises AnswerTooLargeError.
    """
    if query.cluster and query.cluster not in reported:
        shown = query.cluster if len(query.cluster) <= 80 else query.cluster[:80] + "..."
        raise ClusterNotFoundError(f"cluster: {shown!r} has no heartbeat (none reported)")
    selected = [query.cluster] if query.cluster else sorted(reported)
    out = services_pb2.ClustersResponse()
    views = {name: _summary(out.clusters.add(), name, *reported[name]) for name in selected}
    if query.without_nodes:
        return out
    total = sum(len(reported[name][0].nodes) for name in selected)
    if not query.limit and sum(reported[name][0].least_bytes for name in selected) > max_bytes:
        raise AnswerTooLargeError(_too_large(total, max_bytes))  # known before a view is built
    pods = _pods_by_node(book, frozenset(selected))
    size, listed, last = out.ByteSize(), 0, ("", "")
    passed = 0  # nodes of earlier pages
    for name in selected:
        room = reported[name][0]
        start = _start(room, name, query.after)
        passed += start
        for node in room.nodes[start:]:
            view = _node_view(node, pods.get((name, node.name), []))
            size += view.ByteSize() + _FIELD_OVERHEAD
            if listed and (listed == query.limit or size > max_bytes):
                if not query.limit:
                    raise AnswerTooLargeError(_too_large(total, max_bytes))
                out.continue_token = continue_token(query.cluster, last)
                out.remaining_node_count = total - passed - listed
                return out
            views[name].nodes.append(view)
            listed, last = listed + 1, (name, node.name)
    return out


def _start(room: ClusterRoom, name: str, after: tuple[str, str] | None) -> int:
    """How many of `room`'s nodes come before the page after the node `after`."""
    if after is None or name > after[0]:
        return 0
    if name < after[0]:
        return len(room.nodes)
    return bisect.bisect_right(room.names, after[1])


# A node's tag and length inside its cluster, the cluster's own length growing with it: a
# bound on what ByteSize of a lone NodeView leaves out.
_FIELD_OVERHEAD: Final = 12


def _too_large(nodes: int, max_bytes: int) -> str:
    return (
        f"the answer with all {nodes} nodes passes {max_bytes} bytes (what gRPC clients "
        "receive by default): ask with without_nodes for each cluster's totals, with cluster "
        "for one cluster, or with limit to page nodes (then continue_token for the next page)"
    )


def _summary(
    view: services_pb2.ClusterView, name: str, room: ClusterRoom, age: float
) -> services_pb2.ClusterView:
    view.name = name
    view.heartbeat_age_seconds = round(age, 1)
    view.state = _state(room.capacity, age)
    view.reason = room.capacity.reason
    view.message = room.capacity.unreachable
    view.node_count = len(room.nodes)
    view.allocatable_total.update(quantities_to_strings(room.allocatable))
    view.free_total.update(quantities_to_strings(room.free))
    return view


Placed = list[tuple[events_pb2.PodBinding, str]]  # a pod bound to a node, and its workload


def _pods_by_node(book: WorkloadBook, clusters: frozenset[str]) -> dict[tuple[str, str], Placed]:
    pods: dict[tuple[str, str], Placed] = {}
    for entry in book:
        if entry.summary.status == FINISHED or entry.summary.cluster not in clusters:
            continue
        for binding in entry.pods.values():
            pods.setdefault((entry.summary.cluster, binding.node), []).append((binding, entry.key))
    return pods


def _node_view(node: NodeRoom, placed: Placed) -> services_pb2.NodeView:
    here = sorted(placed, key=lambda p: p[0].pod.name)
    return services_pb2.NodeView(
        name=node.name,
        labels=dict(node.labels),
        allocatable=quantities_to_strings(node.allocatable),
        free=quantities_to_strings(node.free),
        pods=[binding for binding, _ in here],
        workloads=sorted({key for _, key in here}),
    )


def _state(capacity: ClusterCapacity, age: float) -> str:
    if age >= SILENT_AFTER_S:
        return "Silent"
    if capacity.reason == HEARTBEAT_REFUSED:
        return "Refused"  # as dispatch refuses it; its message names the cluster and the node
    return "Unavailable" if capacity.unreachable else "Ready"
