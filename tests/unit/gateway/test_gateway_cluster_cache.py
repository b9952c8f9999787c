"""The gateway's held rooms (`HeldRooms`), without NATS: a read asks for exactly the parts whose
digest changed, never combines parts of two heartbeats, shows a bad heartbeat's room (or one no
node has) empty and refused, and forgets clusters and parts no head names any more."""

from __future__ import annotations

import msgspec

from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import HEARTBEAT_REFUSED, decode_wire, encode, pack
from muster.core.heartbeat_parts import Heartbeat, digest, encode_room, part_key
from muster.gateway.cluster_cache import ClusterRoom, HeldRooms, cluster_room

CPU = 1000


def node(i: int, *, busy: int = 0) -> NodeRoom:
    name = f"node-{i:05d}"
    room = {"cpu": 8 * CPU, "pods": 110 * CPU}
    free = {"cpu": room["cpu"] - busy * CPU, "pods": room["pods"]}
    return NodeRoom(name=name, labels={"kubernetes.io/hostname": name}, allocatable=room, free=free)


NODES = tuple(node(i) for i in range(2000))
MAX_BYTES = len(encode(pack(ClusterCapacity(cluster="east", nodes=NODES)))) // 8


def heartbeat(nodes: tuple[NodeRoom, ...], last: Heartbeat | None = None) -> Heartbeat:
    return encode_room(ClusterCapacity(cluster="east", nodes=nodes), max_bytes=MAX_BYTES, last=last)


def read(held: HeldRooms, beat: Heartbeat, *, skip: frozenset[int] = frozenset()) -> None:
    """Give `held` the parts it asks for, as the bucket holds them (but the parts `skip`)."""
    for key in held.missing("east", beat.head):
        n = int(key.rsplit(".", 1)[1])
        if n not in skip:
            held.hold_part(key, beat.parts[n])


def free_cpu(held: HeldRooms, beat: Heartbeat) -> int | None:
    room = held.room("east", beat.head)
    return None if room is None else room.free["cpu"]


def test_a_read_asks_only_for_the_parts_that_changed_and_totals_follow() -> None:
    held = HeldRooms()
    first = heartbeat(NODES)
    assert len(held.missing("east", first.head)) == len(first.parts) > 4
    read(held, first)
    assert free_cpu(held, first) == 2000 * 8 * CPU

    busy = (node(0, busy=3), *NODES[1:])
    second = heartbeat(busy, last=first)
    assert held.missing("east", second.head) == [part_key("east", 0)]
    read(held, second)
    room = held.room("east", second.head)
    assert room == cluster_room(ClusterCapacity(cluster="east", nodes=busy))
    assert room is not None
    assert room.free["cpu"] == (2000 * 8 - 3) * CPU
    assert held.missing("east", second.head) == []  # held: nothing asked again


def test_a_head_whose_part_was_not_read_is_not_whole_until_it_is() -> None:
    held = HeldRooms()
    first = heartbeat(NODES)
    read(held, first)
    second = heartbeat((node(0, busy=1), *NODES[1:]), last=first)
    read(held, second, skip=frozenset({0}))  # the new head came before its part was read

    assert free_cpu(held, second) is None  # never the old part under the new head
    read(held, second)
    assert free_cpu(held, second) == (2000 * 8 - 1) * CPU


def test_a_bad_heartbeat_shows_an_empty_room_and_is_read_again_once_it_changes() -> None:
    held = HeldRooms()
    beat = heartbeat(NODES)
    bad = b'{"rows": [["n", 9, 0, 0, 0]]}'  # a label set index that points nowhere
    wire = decode_wire(beat.head, key="east")
    named = (*wire.parts[:1], digest(bad), *wire.parts[2:])
    head = encode(msgspec.structs.replace(wire, parts=named))
    held.hold_part(part_key("east", 1), bad)
    read(held, beat, skip=frozenset({1}))
    assert held.missing("east", head) == []
    assert refused(held.room("east", head)).startswith("bad heartbeat east.part.1: $.rows[0]")
    assert refused(held.room("west", b"not json")).startswith("bad heartbeat west: ")

    read(held, beat)  # the writer put the part again, whole, and the head naming it
    assert free_cpu(held, beat) == 2000 * 8 * CPU


def refused(room: ClusterRoom | None) -> str:
    """Why `room` is refused: it is empty, and says so as dispatch does."""
    assert room is not None
    assert (room.nodes, room.capacity.reason) == ((), HEARTBEAT_REFUSED)
    return room.capacity.unreachable


def test_a_room_in_parts_no_node_has_is_refused_naming_the_cluster_and_node() -> None:
    # Shown as reported (as before), east's one lying node makes its free room 1e15 cpu.
    lie = msgspec.structs.replace(NODES[1500], free={"cpu": 10**15, "pods": 110 * CPU})
    beat = heartbeat((*NODES[:1500], lie, *NODES[1501:]))
    held = HeldRooms()
    read(held, beat)

    assert refused(held.room("east", beat.head)) == (
        "bad heartbeat east: node 'node-01500' of cluster 'east': free cpu 1000000000000000 "
        "is more than its allocatable 8000 (a room no node has: the heartbeat is refused)"
    )


def test_a_cluster_no_head_names_is_forgotten_with_its_parts() -> None:
    held = HeldRooms()
    beat = heartbeat(NODES)
    read(held, beat)
    assert free_cpu(held, beat) is not None

    held.keep([])
    assert len(held.missing("east", beat.head)) == len(beat.parts)  # read afresh

    read(held, beat)
    small = heartbeat(NODES[:3], last=beat)  # back to one value: its parts are not named
    assert free_cpu(held, small) == 3 * 8 * CPU
    held.keep(["east"])
    assert held.missing("east", beat.head) == [part_key("east", n) for n in range(len(beat.parts))]
