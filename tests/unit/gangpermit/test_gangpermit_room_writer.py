"""Gang-permit's writes of a room in parts, raced by readers: whatever instant a reader looks
at the bucket, or whatever prefix of the writes a follower has seen, the room it takes whole is
one the writer wrote, never parts of two. Parts that did not change are not written again."""

from __future__ import annotations

from memory_kv import MemoryKV

from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import encode, pack
from muster.core.heartbeat_parts import RoomReader, encode_room, read_rooms
from muster.gangpermit.room_writer import RoomWriter

CPU = 1000


def room(nodes: int, *, busy: int = 0, at: int = 0) -> ClusterCapacity:
    rooms = tuple(
        NodeRoom(
            name=f"node-{i:05d}",
            labels={"pool": f"pool-{i % 3}"},
            allocatable={"cpu": 8 * CPU},
            free={"cpu": (8 - (busy if i == at else 0)) * CPU},
        )
        for i in range(nodes)
    )
    return ClusterCapacity(cluster="east", nodes=rooms, placed=("ns/a",))


MAX_BYTES = len(encode(pack(room(1000)))) // 6


class WatchedKV(MemoryKV):
    """After every write: what a reader would take whole, reading the bucket at that instant,
    and what a follower of every write so far takes."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots: list[ClusterCapacity] = []
        self.followed: list[ClusterCapacity] = []
        self.follower = RoomReader()

    def _store(self, key: str, value: bytes | None, last: int | None) -> int:
        revision = super()._store(key, value, last)
        found = self.follower.heard(key, value)
        if isinstance(found, ClusterCapacity):
            self.followed.append(found)
        whole = read_rooms(self.data).whole
        if "east" in whole:
            self.snapshots.append(whole["east"])
        return revision


async def test_readers_racing_the_writer_take_only_rooms_it_wrote() -> None:
    kv, writer = WatchedKV(), RoomWriter("east")
    written = [room(1000), room(1000, busy=2, at=999), room(600, busy=1, at=5), room(10)]
    heartbeat = None
    for capacity in written:
        heartbeat = encode_room(capacity, max_bytes=MAX_BYTES, last=heartbeat)
        await writer.write(kv, heartbeat)
        # Once written, the bucket holds it whole, and parts past it are gone.
        assert read_rooms(kv.data).whole == {"east": capacity}
    assert kv.snapshots
    assert all(s in written for s in kv.snapshots)
    assert kv.followed == written  # a follower sees each heartbeat once, whole
    assert sorted(kv.data) == ["east"]  # back to one value: every part deleted


async def test_only_changed_parts_are_written_again_and_a_restart_reads_what_is_there() -> None:
    kv, writer = MemoryKV(), RoomWriter("east")
    first = encode_room(room(1000), max_bytes=MAX_BYTES)
    assert len(first.parts) > 3
    assert await writer.write(kv, first) == len(first.parts) + 1
    kv.writes.clear()
    assert await writer.write(kv, first) == 1  # nothing changed: the head alone
    assert kv.writes == ["east"]
    second = encode_room(room(1000, busy=1, at=0), max_bytes=MAX_BYTES, last=first)
    kv.writes.clear()
    await writer.write(kv, second)
    assert kv.writes == ["east.part.0", "east"]
    # A new gang-permit process: it reads the parts it left before writing.
    kv.writes.clear()
    fewer = encode_room(room(500), max_bytes=MAX_BYTES, last=first)
    await RoomWriter("east").write(kv, fewer)
    changed = [
        f"east.part.{n}"
        for n, part in enumerate(fewer.parts)
        if n >= len(second.parts) or part != second.parts[n]
    ]
    gone = [f"-east.part.{n}" for n in range(len(fewer.parts), len(second.parts))]
    assert kv.writes == [*changed, "east", *gone]
    assert changed[0] == "east.part.0"  # node 0 is idle again
    assert len(changed) < len(fewer.parts) / 2  # the other nodes' parts stand
    assert read_rooms(kv.data).whole == {"east": room(500)}
