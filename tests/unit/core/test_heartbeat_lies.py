"""A worker's heartbeat claiming a room no cluster has is refused by every reader (one value,
or parts), naming the cluster and the node; an over-committed node (free under 0) stands."""

from __future__ import annotations

import re

import msgspec
import pytest

from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import MAX_AMOUNT, decode_heartbeat
from muster.core.heartbeat_parts import encode_room, read_rooms

CPU = 8_000


def node(name: str, *, free: int = CPU, allocatable: int = CPU) -> NodeRoom:
    return NodeRoom(name=name, allocatable={"cpu": allocatable}, free={"cpu": free})


HONEST = [node(f"n-{i}") for i in range(3)]
LIES = {
    "free over allocatable": (
        [*HONEST, node("big", free=10**15)],
        "node 'big' of cluster 'west': free cpu 1000000000000000 is more than its allocatable 8000",
    ),
    "free of a resource it has none of": (
        [*HONEST, NodeRoom(name="gpu", allocatable={"cpu": CPU}, free={"nvidia.com/gpu": 8})],
        "node 'gpu' of cluster 'west': free nvidia.com/gpu 8 is more than its allocatable 0",
    ),
    "allocatable past any node": (
        [*HONEST, node("huge", free=MAX_AMOUNT + 1, allocatable=MAX_AMOUNT + 1)],
        f"node 'huge' of cluster 'west': allocatable cpu {MAX_AMOUNT + 1} is not 0 to {MAX_AMOUNT}",
    ),
    "allocatable under 0": (
        [*HONEST, node("minus", free=-CPU, allocatable=-CPU)],
        f"node 'minus' of cluster 'west': allocatable cpu {-CPU} is not 0 to {MAX_AMOUNT}",
    ),
    "a node listed twice": (
        [*HONEST, HONEST[0]],
        "node 'n-0' of cluster 'west' is listed twice (its room would count twice)",
    ),
}


@pytest.mark.parametrize("lie", LIES)
def test_a_heartbeat_claiming_impossible_room_is_refused_naming_the_node(lie: str) -> None:
    nodes, said = LIES[lie]
    capacity = ClusterCapacity(cluster="west", nodes=tuple(nodes))

    whole = encode_room(capacity, max_bytes=1 << 20)
    with pytest.raises(msgspec.ValidationError, match="^" + re.escape(said)):
        decode_heartbeat(whole.head, key="west")

    parted = encode_room(capacity, max_bytes=200)  # a part per node or two
    assert parted.parts, "the room went in parts"
    entries = {f"west.part.{n}": part for n, part in enumerate(parted.parts)}
    rooms = read_rooms({**entries, "west": parted.head})
    assert rooms.whole == {}
    assert said in rooms.bad["west"]


def test_an_over_committed_node_and_an_honest_pool_stand() -> None:
    nodes = (*HONEST, node("over", free=-2_000))  # its pods take more than it has now
    capacity = ClusterCapacity(cluster="west", nodes=nodes)

    read = decode_heartbeat(encode_room(capacity, max_bytes=1 << 20).head, key="west")

    assert read == capacity
