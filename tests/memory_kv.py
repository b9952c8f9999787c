"""A key-value bucket in memory with the JetStream semantics the visibility writer relies on:
one revision counter for the whole bucket, writes and deletes at an expected revision
(`Conflict` when another came first), tombstones that keep their revision. Also the
gateway's read side (`VisibilityStore`)."""

from __future__ import annotations

import fnmatch

from muster.bus.errors import Conflict
from muster.bus.kv import Entry


class MemoryKV:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}  # live keys
        self.last: dict[str, int] = {}  # every key's last revision, tombstones included
        self.revision = 0
        self.writes: list[str] = []  # "key" for a put, "-key" for a delete
        self.read: list[str] = []  # keys the gateway's side read
        self.forgotten: set[str] = set()  # keys deleted with a tombstone that expires

    def _store(self, key: str, value: bytes | None, last: int | None) -> int:
        if last is not None and self.last.get(key, 0) != last:
            raise Conflict(key, last)
        self.revision += 1
        self.last[key] = self.revision
        if value is None:
            self.data.pop(key, None)
            self.writes.append(f"-{key}")
        else:
            self.data[key] = value
            self.writes.append(key)
        return self.revision

    async def put(self, key: str, value: bytes) -> int:
        return self._store(key, value, None)

    async def write(self, key: str, data: bytes, *, last: int) -> int:
        return self._store(key, data, last)

    async def delete(
        self, key: str, last: int | None = None, *, forget_after_s: float | None = None
    ) -> None:
        self._store(key, None, last)
        if forget_after_s is not None:
            self.forgotten.add(key)

    async def last_write(self, key: str) -> Entry | None:
        if key not in self.last:
            return None
        return Entry(key, self.data.get(key), self.last[key], 0.0)

    async def snapshot(self, pattern: str) -> dict[str, Entry]:
        """Live keys matching a NATS pattern whose wildcards stand for one token each (`*`)
        or the rest (`>`, last)."""
        glob = pattern.replace("*", "[!.]*").removesuffix(">") + ("*" if pattern[-1] == ">" else "")
        return {
            k: Entry(k, v, self.last[k], 0.0)
            for k, v in self.data.items()
            if fnmatch.fnmatchcase(k, glob) and k.count(".") >= pattern.count(".")
            and (pattern[-1] == ">" or k.count(".") == pattern.count("."))
        }  # fmt: skip

    async def get(self, key: str) -> bytes | None:  # the gateway's side
        self.read.append(key)
        return self.data.get(key)

    async def entries(self, pattern: str) -> dict[str, bytes]:
        return {k: e.value or b"" for k, e in (await self.snapshot(pattern)).items()}
