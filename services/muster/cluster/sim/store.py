"""The simulated API server: Kubernetes-shaped objects as JSON in KV bucket `MUSTER_SIM_<cluster>`.

`SimStore` gives get, optimistic create/update/delete, list and watch (resumable by revision,
the KV stream sequence), over a `muster.bus.Bucket`. `SimBackend` and the sim kubelet are
built on it; keys are in `keys.py`. Every bus error leaves as a `ClusterError`.

A delete writes the KV tombstone with the object's last state as its body (the tombstone
header is what the KV protocol reads; the body is ignored by other KV clients), so a watch
resumed after a delete still reports what was deleted, as a Kubernetes watch does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any, Final

import msgspec

from muster.bus.errors import BusError, Conflict, Reject
from muster.bus.kv import Bucket, Change, OpenBucket
from muster.cluster.backend import ChangeType
from muster.cluster.errors import ClusterError, ConflictError, ExpiredError
from muster.cluster.keys import bucket_name, describe

# Not an object: the revision up to which pod tombstones may have been pruned (written by
# `tombstones.prune_once`); a watch resumed below it may have missed deletions.
PRUNED_KEY: Final = "pruned"


def revision_in(value: bytes | None) -> int:
    """A revision stored as decimal text (0: none, or not a number)."""
    try:
        return max(int(value or b"0"), 0)
    except ValueError:
        return 0


class StoredObject(msgspec.Struct, frozen=True, kw_only=True):
    """One object as stored, with the revision that wrote it."""

    key: str
    obj: dict[str, Any]
    revision: int


class StoreChange(msgspec.Struct, frozen=True, kw_only=True):
    """One change seen by `SimStore.watch`; DELETED carries the object's last state."""

    type: ChangeType
    key: str
    obj: dict[str, Any]
    revision: int


@contextlib.contextmanager
def bus_errors(key: str = "") -> Iterator[None]:
    """Raise every bus failure inside as a ClusterError (lost optimistic writes as conflicts)."""
    try:
        yield
    except BusError as exc:
        raise cluster_error(exc, key) from exc


def cluster_error(exc: BusError, key: str = "") -> ClusterError:
    """The ClusterError a bus failure at `key` is (`bus_errors`)."""
    if isinstance(exc, Conflict):
        return ConflictError(_described(key))
    if isinstance(exc, Reject):
        return ClusterError(_described(key), "Invalid", str(exc))
    return ClusterError(_described(key), "Unavailable", f"NATS: {exc}", temporary=True)


def _described(key: str) -> str:
    return describe(key) if key else ""


class SimStore:
    """Objects of one simulated cluster. Construct with `SimStore.open`."""

    def __init__(self, bucket: Bucket) -> None:
        self._bucket = bucket
        self.bucket = bucket.name

    @classmethod
    async def open(cls, open_bucket: OpenBucket, *, cluster: str) -> SimStore:
        """Return the store of `cluster` in the buckets `open_bucket` opens (`Bus.kv`: writes
        go through the bus's publisher, about half the CPU of nats-py's JetStream publish),
        creating its bucket when missing."""
        with bus_errors():
            return cls(await open_bucket(bucket_name(cluster)))

    async def get(self, key: str) -> StoredObject | None:
        """Return the object at `key`, or None when there is none."""
        with bus_errors(key):
            entry = await self._bucket.get(key)
        if entry is None or entry.value is None:
            return None
        return StoredObject(key=key, obj=_decode(entry.value), revision=entry.revision)

    async def create(self, key: str, obj: dict[str, Any]) -> int:
        """Store a new object; raise ConflictError when one exists. Return its revision.

        A key whose last write is a tombstone is free (the KV protocol's create does the same).
        """
        data = _encode(obj)
        try:
            return await self._write(key, data, last=0)
        except ConflictError:
            with bus_errors(key):
                last = await self._bucket.last_write(key)
            if last is None or last.value is not None:
                raise
            return await self._write(key, data, last=last.revision)

    async def update(self, key: str, obj: dict[str, Any], *, revision: int) -> int:
        """Replace the object stored at `revision`; raise ConflictError if it changed since."""
        return await self._write(key, _encode(obj), last=revision)

    async def delete(self, stored: StoredObject) -> int:
        """Delete `stored` unless it changed since it was read (then ConflictError).

        The tombstone carries the object's last state (see the module docstring).
        """
        data = _encode(stored.obj)
        return await self._write(stored.key, data, last=stored.revision, deleting=True)

    async def _write(self, key: str, data: bytes, *, last: int, deleting: bool = False) -> int:
        """Store `data` at `key` if `last` is still its last revision (0: none); the revision."""
        try:  # not `bus_errors`: its generator and context cost a few µs per write (pod)
            return await self._bucket.write(key, data, last=last, deleting=deleting)
        except BusError as exc:
            raise cluster_error(exc, key) from exc

    async def last_revision(self, *prefixes: str) -> int:
        """Return the revision of the latest write to the bucket, or under `prefixes` (whole
        tokens, as `watch` takes them) when given (0 when there is none)."""
        with bus_errors():
            return await self._bucket.last_revision(*prefixes)

    async def pruned_up_to(self) -> int:
        """The revision below which pod tombstones may be pruned (`tombstones.py`; 0: none)."""
        entry = await self.get_raw(PRUNED_KEY)
        return revision_in(entry)

    async def get_raw(self, key: str) -> bytes | None:
        with bus_errors(key):
            entry = await self._bucket.get(key)
        return None if entry is None else entry.value

    async def list(self, prefix: str = "") -> list[StoredObject]:
        """Return every object whose key starts with `prefix` (a whole token: "pod.ml."), by key.

        Lists the stream's subjects, then reads each key: a key written meanwhile is read at its
        newest, one deleted (a tombstone) is left out, and none that exists throughout is ever
        missed (a last-per-subject consumer cut off by its pending count could miss keys
        rewritten during the read).
        """
        with bus_errors():
            keys = await self._bucket.keys(prefix)
        limit = asyncio.Semaphore(64)

        async def read(key: str) -> StoredObject | None:
            async with limit:
                return await self.get(key)

        found = await asyncio.gather(*(read(k) for k in keys if k != PRUNED_KEY))
        return [obj for obj in found if obj is not None]

    async def watch(
        self,
        *prefixes: str,
        from_revision: int = 0,
        on_skipped: Callable[[int], None] | None = None,
        expires: bool = False,
        on_listed: Callable[[], None] | None = None,
    ) -> AsyncGenerator[StoreChange, None]:
        """Yield the objects under `prefixes` (whole tokens: "pod.", "node."; none: every key) as
        ADDED, then every change, in revision order (one watch: changes of different prefixes
        come in the order they were written).

        With `from_revision` > 0 there is no initial list: only writes after that revision,
        each reported with the latest state of its key. See `ClusterBackend.watch` for the
        meaning of ADDED and MODIFIED (level-triggered). Never yields a revision twice.
        `on_skipped(revision)` is called for each write the watch read but does not yield (a
        tombstone of a key it never showed), so a caller can tell how far the watch has read.
        With `expires`, a resume from below the pruned tombstones (`PRUNED_KEY`) raises
        ExpiredError: it would miss their deletions. `on_listed()` (from 0 only) is called once
        the objects listed were yielded (`ClusterBackend.watch`).
        """
        resuming = from_revision > 0
        if resuming and expires:
            pruned = await self.pruned_up_to()
            if pruned > from_revision:
                raise ExpiredError(
                    "",
                    f"revision {from_revision} is too old: pod deletions up to {pruned} are "
                    "forgotten (tombstones pruned); list again",
                )
        changes = self._bucket.changes(
            *prefixes,
            after=from_revision if resuming else None,
            on_caught_up=None if resuming else on_listed,
        )
        shown: set[str] = set()
        last = from_revision
        try:
            with bus_errors():
                async for raw in changes:
                    marker = raw.key == PRUNED_KEY
                    change = None if marker else _change(raw, shown, resuming=resuming)
                    if change is None or change.revision <= last:
                        if on_skipped is not None:
                            on_skipped(raw.revision)
                        continue
                    last = change.revision
                    yield change
        finally:
            await changes.aclose()


def _change(raw: Change, shown: set[str], *, resuming: bool) -> StoreChange | None:
    change_type: ChangeType
    if raw.deleted:
        # Outside a resume, a tombstone for a key this watch never showed is history.
        if raw.key not in shown and not resuming:
            return None
        shown.discard(raw.key)
        change_type = "DELETED"
    else:
        change_type = "MODIFIED" if raw.key in shown else "ADDED"
        shown.add(raw.key)
    return StoreChange(type=change_type, key=raw.key, obj=_decode(raw.data), revision=raw.revision)


def _encode(obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode(obj, order="sorted")


# One decoder for every read: `msgspec.json.decode(data, type=dict[str, Any])` looks the type up
# on each call, which took longer than decoding a pod (5.7 µs against 2.0 for a 950-byte one).
_OBJECT = msgspec.json.Decoder(dict[str, Any])


def _decode(data: bytes) -> dict[str, Any]:
    """Return a stored object; an empty body (a tombstone another client wrote) is {}."""
    return _OBJECT.decode(data) if data else {}
