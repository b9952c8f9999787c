"""Gang-permit's puts of its cluster's room in `MUSTER_CLUSTERS`, in the order readers rely on.

The parts of a room in parts (layout 3, `muster.core.heartbeat_parts`) go first, then the head
naming them, then the deletes of parts past the new count: a reader that holds a head can
always find the parts it names, or newer ones it waits past. A part whose bytes this writer
already put is not put again, so an idle large cluster's heartbeat is its head alone. A deleted
part's tombstone expires (`tombstones_kept_s`): no head names it, so a reader that missed the
delete holds a part it never reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from muster.bus.kv import Entry
from muster.core.heartbeat_parts import Heartbeat, part_key, part_of, parts_pattern


class RoomBucket(Protocol):
    async def put(self, key: str, value: bytes) -> int: ...

    async def delete(
        self, key: str, last: int | None = None, *, forget_after_s: float | None = None
    ) -> None: ...

    async def snapshot(self, pattern: str) -> Mapping[str, Entry]: ...


class RoomWriter:
    """Puts each heartbeat of one cluster; remembers what the bucket holds of its parts."""

    def __init__(self, cluster: str, *, tombstones_kept_s: float | None = None) -> None:
        self.cluster = cluster
        self.tombstones_kept_s = tombstones_kept_s  # None: a deleted part's tombstone stays
        self._stored: dict[int, bytes] | None = None  # its parts in the bucket (None: read it)

    async def write(self, bucket: RoomBucket, heartbeat: Heartbeat) -> int:
        """Put `heartbeat` (the parts that changed, the head, then deletes); the values put.

        After an error the bucket is read again before the next write: this one may have
        stopped anywhere."""
        stored, self._stored = self._stored, None
        if stored is None:  # at start: parts an earlier process left
            stored = await self._read(bucket)
        puts = 0
        for n, part in enumerate(heartbeat.parts):
            if stored.get(n) != part:
                await bucket.put(part_key(self.cluster, n), part)
                puts += 1
        await bucket.put(self.cluster, heartbeat.head)
        # Readers may still be reading the parts of the last head: only now are they gone.
        for n in sorted(stored):
            if n >= len(heartbeat.parts):
                key = part_key(self.cluster, n)
                await bucket.delete(key, forget_after_s=self.tombstones_kept_s)
        self._stored = dict(enumerate(heartbeat.parts))
        return puts + 1

    async def _read(self, bucket: RoomBucket) -> dict[int, bytes]:
        found = await bucket.snapshot(parts_pattern(self.cluster))
        return {
            part[1]: entry.value
            for key, entry in found.items()
            if (part := part_of(key)) is not None and entry.value is not None
        }
