"""Visibility.Clusters asking for every node of rooms too large for one answer
(`clusters.clusters_view`): refused from what the decoded heartbeats already say
(`ClusterRoom.least_bytes`), before a single node's view is built; and that bound is never
more than the views take, so an answer that fits is never refused."""

from __future__ import annotations

import pytest

from muster.contracts.v1 import services_pb2
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat_parts import encode_room
from muster.gateway import clusters
from muster.gateway.book import WorkloadBook
from muster.gateway.cluster_cache import HeldRooms, cluster_room
from muster.gateway.clusters import AnswerTooLargeError, clusters_view
from muster.gateway.node_pages import NodeQuery

CPU = 1000


def node(i: int, *, labels: int = 4) -> NodeRoom:
    name = f"node-{i:05d}"
    return NodeRoom(
        name=name,
        labels={f"example.com/l{j}": f"value-{i}-{j}" for j in range(labels)},
        allocatable={"cpu": 8 * CPU, "memory": 2**40, "pods": 110 * CPU},
        free={"cpu": i % 8 * CPU, "memory": 0, "pods": 0},
    )


def held_room(nodes: tuple[NodeRoom, ...]) -> tuple[HeldRooms, bytes]:
    """The gateway's held rooms after reading `nodes`' heartbeat in parts, and its head."""
    beat = encode_room(ClusterCapacity(cluster="east", nodes=nodes), max_bytes=64 * 1024)
    held = HeldRooms()
    for key in held.missing("east", beat.head):
        held.hold_part(key, beat.parts[int(key.rsplit(".", 1)[1])])
    return held, beat.head


def test_every_node_past_the_answer_size_is_refused_before_any_view_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held, head = held_room(tuple(node(i) for i in range(3000)))
    room = held.room("east", head)
    assert room is not None
    built: list[str] = []
    real = clusters._node_view

    def counted(n: NodeRoom, placed: clusters.Placed) -> services_pb2.NodeView:
        built.append(n.name)
        return real(n, placed)

    monkeypatch.setattr(clusters, "_node_view", counted)
    whole = clusters_view({"east": (room, 0.0)}, WorkloadBook())
    max_bytes = whole.ByteSize() // 4
    built.clear()

    with pytest.raises(AnswerTooLargeError, match="all 3000 nodes"):
        clusters_view({"east": (room, 0.0)}, WorkloadBook(), max_bytes=max_bytes)

    assert built == []
    page = clusters_view(
        {"east": (room, 0.0)}, WorkloadBook(), NodeQuery(limit=10_000), max_bytes=max_bytes
    )
    assert 0 < len(page.clusters[0].nodes) < 3000  # pages still end by size
    assert page.continue_token


@pytest.mark.parametrize(
    "nodes",
    [
        (NodeRoom(name="n"),),
        (NodeRoom(name="n", labels={"k": ""}, allocatable={"a": 0}, free={"a": 0}),),
        tuple(node(i, labels=0) for i in range(50)),
        tuple(node(i, labels=30) for i in range(50)),
    ],
    ids=["bare", "empty-values", "no-labels", "many-labels"],
)
def test_the_bound_is_never_more_than_the_views_take(nodes: tuple[NodeRoom, ...]) -> None:
    room = cluster_room(ClusterCapacity(cluster="east", nodes=nodes))
    answer = clusters_view({"east": (room, 0.0)}, WorkloadBook())
    (view,) = answer.clusters
    nodes_bytes = sum(n.ByteSize() + 2 for n in view.nodes)  # each with its tag and length

    assert 0 < room.least_bytes <= nodes_bytes
