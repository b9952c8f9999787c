"""A room over NATS's max_payload in parts (layout 3): each part under the limit, read whole,
never from parts of two heartbeats; a part that did not change keeps its bytes."""

from __future__ import annotations

import msgspec
import pytest

from muster.core import heartbeat_parts
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import decode_heartbeat, decode_wire, encode, pack
from muster.core.heartbeat_parts import (
    Gone,
    Heartbeat,
    RoomReader,
    encode_room,
    part_key,
    part_of,
    read_rooms,
)

CPU = 1000


def node(i: int, *, busy: int = 0) -> NodeRoom:
    name = f"node-{i:05d}"
    labels = {"kubernetes.io/hostname": name, "pool": f"pool-{i % 4}"}
    room = {"cpu": 8 * CPU, "pods": 110 * CPU}
    free = {"cpu": room["cpu"] - busy * CPU, "pods": room["pods"] - busy * CPU}
    return NodeRoom(name=name, labels=labels, allocatable=room, free=free)


def cluster(
    nodes: int, *, placed: int = 300, busy: dict[int, int] | None = None
) -> ClusterCapacity:
    busy = busy or {}
    return ClusterCapacity(
        cluster="east",
        nodes=tuple(node(i, busy=busy.get(i, 0)) for i in range(nodes)),
        placed=tuple(f"ns/w{i:05d}" for i in range(placed)),
    )


SIZE = len(encode(pack(cluster(2000))))
MAX_BYTES = SIZE // 8


def values(room: Heartbeat, cluster: str = "east") -> dict[str, bytes]:
    return {cluster: room.head, **{part_key(cluster, n): p for n, p in enumerate(room.parts)}}


def test_a_room_over_max_bytes_goes_in_parts_under_it_and_is_read_whole() -> None:
    capacity = cluster(2000)
    room = encode_room(capacity, max_bytes=MAX_BYTES)
    assert len(room.parts) > 8
    assert all(len(p) <= MAX_BYTES for p in room.parts)
    assert len(room.head) < 1000
    rooms = read_rooms(values(room))
    assert rooms.whole == {"east": capacity}
    assert (rooms.bad, rooms.torn) == ({}, frozenset())
    # A reader that follows the bucket: parts first (the writer's order), whole at the head.
    reader = RoomReader()
    assert [reader.heard(k, v) for k, v in values(room).items() if k != "east"] == [None] * len(
        room.parts
    )
    assert reader.heard("east", room.head) == capacity


def test_a_room_that_fits_is_one_value_of_layout_2_again() -> None:
    big = encode_room(cluster(2000), max_bytes=MAX_BYTES)
    small = encode_room(cluster(10, placed=1), max_bytes=MAX_BYTES, last=big)
    assert small.parts == ()
    assert msgspec.json.decode(small.head)["layout"] == 2
    assert read_rooms(values(small)).whole == {"east": cluster(10, placed=1)}


def test_a_nodes_change_changes_only_its_own_part() -> None:
    before = encode_room(cluster(2000), max_bytes=MAX_BYTES)
    after = encode_room(cluster(2000, busy={1500: 3}), max_bytes=MAX_BYTES, last=before)
    changed = [n for n, (a, b) in enumerate(zip(before.parts, after.parts, strict=True)) if a != b]
    assert changed == [1500 // before.per_part]
    assert after.head != before.head


def test_a_run_of_the_same_nodes_is_not_encoded_again() -> None:
    capacity = cluster(2000)
    before = encode_room(capacity, max_bytes=MAX_BYTES)
    nodes = (*capacity.nodes[:1500], node(1500, busy=3), *capacity.nodes[1501:])
    after = encode_room(
        msgspec.structs.replace(capacity, nodes=nodes), max_bytes=MAX_BYTES, last=before
    )
    fresh = [
        n for n, (a, b) in enumerate(zip(before.parts, after.parts, strict=True)) if a is not b
    ]
    assert fresh == [1500 // before.per_part]
    assert read_rooms(values(after)).whole["east"].nodes == nodes


def test_what_the_last_heartbeat_learned_changes_no_byte() -> None:
    """The writer hands each heartbeat the last one (its split, parts and what packing learned
    of each node): the values are those of a heartbeat computed afresh."""
    capacity = cluster(2000)
    changed = msgspec.structs.replace(
        capacity, nodes=(node(0, busy=5), *capacity.nodes[1:]), placed=capacity.placed[1:]
    )
    for max_bytes in (MAX_BYTES, SIZE * 2):  # in parts, and one value
        last = encode_room(capacity, max_bytes=max_bytes)
        fresh = encode_room(changed, max_bytes=max_bytes)
        again = encode_room(changed, max_bytes=max_bytes, last=last)
        assert (again.head, again.parts) == (fresh.head, fresh.parts)


def test_a_reader_never_combines_parts_of_two_heartbeats() -> None:
    old = encode_room(cluster(2000), max_bytes=MAX_BYTES)
    new = encode_room(cluster(2000, busy={0: 1}), max_bytes=MAX_BYTES, last=old)
    reader = RoomReader()
    for key, value in values(old).items():
        whole = reader.heard(key, value)
    assert whole == cluster(2000)
    # The new head comes before its changed part (a read that started late): not whole yet.
    assert reader.heard("east", new.head) is None
    assert reader.waiting() == {"east"}
    assert reader.heard(part_key("east", 0), new.parts[0]) == cluster(2000, busy={0: 1})
    # One read of the bucket with the old head and a part of the new one: torn, read again.
    torn = {**values(old), part_key("east", 0): new.parts[0]}
    rooms = read_rooms(torn)
    assert rooms.whole == {}
    assert rooms.torn == {"east"}


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The heads and parts the reader decodes, as heard."""
    seen: list[bytes] = []
    part = heartbeat_parts._part_decoder

    def decode_head(data: bytes, *, key: str) -> object:
        seen.append(data)
        return decode_wire(data, key=key)

    class Parts:
        def decode(self, data: bytes) -> object:
            seen.append(data)
            return part.decode(data)

    monkeypatch.setattr(heartbeat_parts, "decode_wire", decode_head)
    monkeypatch.setattr(heartbeat_parts, "_part_decoder", Parts())
    return seen


@pytest.mark.parametrize("max_bytes", [MAX_BYTES, SIZE * 2], ids=["parts", "one value"])
def test_a_beat_that_says_what_the_last_said_is_not_decoded_again(
    decoded: list[bytes], max_bytes: int
) -> None:
    """Every replica that follows the bucket hears every beat, up to ten a second per cluster:
    most say what the one before said, and the room they give is the one already held."""
    first = encode_room(cluster(2000), max_bytes=max_bytes)
    reader = RoomReader()
    for key, value in values(first).items():
        whole = reader.heard(key, value)
    assert whole == cluster(2000)
    read = len(decoded)
    # The same head again, and a part put again as it was (a writer that restarted).
    assert reader.heard("east", first.head) == cluster(2000)
    if first.parts:
        assert reader.heard(part_key("east", 0), first.parts[0]) is None
    assert len(decoded) == read
    # A room that changed is read, and only what changed in it.
    busy = encode_room(cluster(2000, busy={0: 1}), max_bytes=max_bytes, last=first)
    for key, value in values(busy).items():
        if key == "east" or value not in first.parts:
            whole = reader.heard(key, value)
    assert whole == cluster(2000, busy={0: 1})
    assert len(decoded) == read + (2 if first.parts else 1)
    # Deleted and put again: read afresh.
    assert reader.heard("east", None) == Gone("east")
    assert reader.heard("east", busy.head) == cluster(2000, busy={0: 1})
    assert len(decoded) == read + (3 if first.parts else 2)


def test_a_deleted_head_is_gone_and_a_deleted_part_is_not() -> None:
    reader = RoomReader()
    assert reader.heard(part_key("east", 3), None) is None
    assert reader.heard("east", None) == Gone("east")
    assert part_of(part_key("east", 12)) == ("east", 12)
    assert part_of("east") is None


def test_a_part_is_refused_by_readers_before_parts_and_a_head_has_no_nodes_for_them() -> None:
    """Readers first, then writers (docs/events.md); one that meets parts anyway sees no room
    there, never a part of it."""
    room = encode_room(cluster(2000), max_bytes=MAX_BYTES)
    with pytest.raises(msgspec.ValidationError, match="missing required field `cluster`"):
        decode_heartbeat(room.parts[0], key="east")
    assert decode_heartbeat(room.head, key="east") == ClusterCapacity(cluster="east")


def test_a_bad_part_makes_the_room_bad_naming_the_key() -> None:
    room = encode_room(cluster(2000), max_bytes=MAX_BYTES)
    entries = {**values(room), part_key("east", 1): b'{"rows": [["n", 9, 0, 0, 0]]}'}
    rooms = read_rooms(entries)
    assert rooms.whole == {}
    assert rooms.bad["east"].startswith("bad heartbeat east.part.1: $.rows[0][1]: label_sets")
