"""Writing the visibility keys: what changed since the last write, fenced on each
ClusterQueue's owner.

A ClusterQueue's keys have one writer, the replica deciding its tree; but when the tree moves,
the old owner may still write for a moment after the new one (it reads the move later, or its
writes are still on the wire). So that none of its writes lands after the new owner's
(docs/events.md, "Visibility across a move"):

- an owner writes under its epoch for the queue (`VisibilityRenderer.fence`: a newer owner's
  is larger): in the index's `epoch`, and in its page keys, so two owners' pages never share
  a key;
- the queue's other keys (its index, `cq.<name>`, its LocalQueues' `lq.` keys) are written
  at the revision this writer last wrote or read them at (compare-and-set), the index before
  the statuses, and a status's first write in a life only after its revision was read and the
  index found no newer: a refused write or an index of a larger epoch means a newer owner
  writes the queue, and this writer stops writing it, deleting the pages it wrote (no index
  names them any more);
- a key is deleted only at the revision this writer wrote it at;
- the status of a LocalQueue whose ClusterQueue does not exist (no index to hold an epoch)
  carries its owner's epoch itself (`LocalQueueStatus.epoch`), and is written at the revision
  last written or read unless the stored one carries a larger epoch;
- a key written under an epoch the renderer has since replaced is written again, not compared
  with what was written: another owner may have written or deleted it meanwhile.

A first index write of a queue deletes the pages no index will name: those of older epochs (a
former owner's, a killed life's) and those of its own epoch it did not write (a former life of
the same epoch, killed between a page and its index); a newer owner's pages are its own to
sweep. An older owner's page may still land after that (written late, its writer killed
before it read the move): `sweep_late_pages`, every LATE_PAGES_SWEEP_S, deletes again the
pages of older epochs of the queues whose index this writer wrote. Deleted keys leave
tombstones that expire (`tombstones_kept_s`), so the bucket holds what owners write now, not
every page id and epoch it ever held (docs/events.md, "Deleted keys leave").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Final, Protocol, TypeVar

from google.protobuf.message import DecodeError

from muster.admission.visibility import (
    INDEX_PREFIX,
    LOCAL_QUEUE_PREFIX,
    PAGE_PREFIX,
    pending_index_key,
)
from muster.bus.errors import Conflict
from muster.bus.kv import Entry, valid_key
from muster.bus.progress import advanced
from muster.contracts.v1 import events_pb2, services_pb2

log = logging.getLogger(__name__)

T = TypeVar("T")

SWEEPS_AT_ONCE: Final = 16  # listings of former pages side by side, at a life's first write
# How often the pages an older owner wrote late are looked for: they are named by no index,
# so they only take room (and a key) until then.
LATE_PAGES_SWEEP_S: Final = 60.0
# For how many sweeps after a queue's claim: an older owner's page lands late only while its
# writer lives unaware of the move (a write in flight, a pause); alive, it learns the move and
# deletes its pages itself, so only one killed within those minutes leaves one behind.
LATE_PAGE_SWEEPS: Final = 10


class KeyValueWriter(Protocol):
    """The part of a JetStream key-value bucket the writer uses (the bus's `Bucket`)."""

    async def put(self, key: str, value: bytes) -> int: ...

    async def write(self, key: str, data: bytes, *, last: int) -> int: ...

    async def delete(
        self, key: str, last: int | None = None, *, forget_after_s: float | None = None
    ) -> None: ...

    async def last_write(self, key: str) -> Entry | None: ...

    async def snapshot(self, pattern: str) -> Mapping[str, object]: ...


class KeyListing(Protocol):
    """The bucket's listing of its live keys (the bus's `Bucket.snapshot`)."""

    async def snapshot(self, pattern: str) -> Mapping[str, object]: ...


class Fencing(Protocol):
    """Who owns a key (`VisibilityRenderer.fence`, `.alone`, `.epoch_of`)."""

    def fence(self, key: str) -> tuple[str, int] | None: ...

    def alone(self, key: str) -> int | None: ...

    def epoch_of(self, key: str) -> int | None: ...


# The keys of pending lists before indexes (issue 19's pages of 100, positions set):
# `pending.<cq>` and `pending-from.<start>.<cq>`.
_LEGACY: Final = (("pending.>", 1), ("pending-from.>", 2))


class VisibilityWriter:
    """Writes the keys whose values changed since the last flush; deletes vanished ones.
    With `fencing`, a ClusterQueue's keys only while no newer owner writes them."""

    def __init__(
        self,
        kv: KeyValueWriter,
        fencing: Fencing | None = None,
        *,
        tombstones_kept_s: float | None = None,
    ) -> None:
        self.kv = kv
        self.fencing = fencing
        self.tombstones_kept_s = tombstones_kept_s  # None: deleted keys' tombstones stay
        self.swept = False  # the layout before indexes: deleted for our ClusterQueues once
        self.written: dict[str, bytes] = {}
        self.written_epochs: dict[str, int] = {}  # a fenced key's epoch when it was written
        self.revisions: dict[str, int] = {}  # the revision a key was last written or read at
        # (ClusterQueue, our epoch) a newer owner writes: a later epoch of ours writes again.
        self.superseded: set[tuple[str, int]] = set()
        self.claimed: set[tuple[str, int]] = set()  # (ClusterQueue, epoch) we wrote the index of
        self.late_sweeps: dict[tuple[str, int], int] = {}  # claimed: late-page sweeps left
        # (`lq.` key, our epoch) a newer owner writes: of no ClusterQueue, or of one of ours.
        self.superseded_alone: set[tuple[str, int]] = set()
        self.refused: set[str] = set()  # invalid keys, logged once
        self.owed: set[str] | None = None  # keys a failed write left; None: compare every key
        self._sweeps = asyncio.Semaphore(SWEEPS_AT_ONCE)

    def changes(
        self, values: Mapping[str, bytes], keys: Iterable[str] | None = None
    ) -> tuple[dict[str, bytes], list[str]]:
        """(keys to put with their values, keys to delete), against what was written; of
        `keys` only, and of what a failed write left, when given."""
        if keys is None or self.owed is None:
            put = {k: v for k, v in values.items() if not self._stands(k, v)}
            gone = [k for k in self.written if k not in values]
            return put, gone
        keys = self.owed.union(keys)
        put = {k: values[k] for k in keys if k in values and not self._stands(k, values[k])}
        return put, [k for k in keys if k not in values and k in self.written]

    def _stands(self, key: str, value: bytes) -> bool:
        """Whether `value` is in the bucket at `key` as this writer wrote it, under the epoch
        the key has now."""
        if self.written.get(key) != value:
            return False
        return self.fencing is None or self.written_epochs.get(key) == self.fencing.epoch_of(key)

    async def write(
        self, values: Mapping[str, bytes], keys: Iterable[str] | None = None
    ) -> list[str]:
        """Store the changes, side by side (each key is written once); returns the keys put.
        `keys`: the only keys that may have changed since the last call (a renderer's).

        Pending pages are put before the indexes naming them, and keys are deleted after
        both, so a reader never finds an index naming a page not yet written or already
        deleted. A key is remembered as written only once its write succeeded, so a failed
        write leaves the rest to the next call.
        """
        put, gone = self.changes(values, keys)
        self.owed = set(put).union(gone)  # until written
        for key in [k for k in put if not valid_key(k)]:
            # A name stored before names were checked (a LocalQueue `../x`): it cannot be a key,
            # and must not keep the other keys from being written. Said once.
            del put[key]
            if key not in self.refused:
                self.refused.add(key)
                log.error("visibility key %r is not a valid key: not written", key)
        plain: dict[str, bytes] = {}
        queues: dict[tuple[str, int], dict[str, bytes]] = {}
        alone: dict[str, tuple[bytes, int]] = {}
        for key, value in put.items():
            fence = None if self.fencing is None else self.fencing.fence(key)
            epoch = None if self.fencing is None or fence else self.fencing.alone(key)
            if epoch is not None:
                if (key, epoch) not in self.superseded_alone:
                    alone[key] = (value, epoch)
            elif fence is None:
                plain[key] = value
            elif fence not in self.superseded and (key, fence[1]) not in self.superseded_alone:
                queues.setdefault(fence, {})[key] = value
        await _together(
            (self._write_queue(cq, epoch, keys) for (cq, epoch), keys in queues.items()),
            (self._write_alone(key, value, epoch) for key, (value, epoch) in alone.items()),
        )
        indexes = {k for k in plain if k.startswith(INDEX_PREFIX)}  # unfenced: after pages too
        await _together(self._put(k, v) for k, v in plain.items() if k not in indexes)
        await _together(self._put(k, plain[k]) for k in indexes)
        await _together(self._delete(k) for k in gone if k in self.written)
        self.owed = set()
        return [k for k in put if k in self.written]

    async def _write_queue(self, cluster_queue: str, epoch: int, values: dict[str, bytes]) -> None:
        """Write one ClusterQueue's changed keys while no newer owner writes them."""
        index = pending_index_key(cluster_queue)
        pages = [k for k in values if k.startswith(PAGE_PREFIX)]
        others = [k for k in values if k != index and not k.startswith(PAGE_PREFIX)]
        await _together(self._put(k, values[k]) for k in pages)  # our epoch's: no one else's
        unread = [k for k in others if k not in self.revisions]
        await _gathered(self._read_revision(k, epoch) for k in unread)
        others = [k for k in others if (k, epoch) not in self.superseded_alone]
        if index in values:
            ours = await self._claim(index, values[index], epoch)
        else:  # a status written first: read its revision before the index says it is ours
            ours = not unread or await self._stored_epoch(index) <= epoch
        if ours:
            await _together(self._update(cluster_queue, epoch, k, values[k]) for k in others)
        else:
            await self._give_up(cluster_queue, epoch)

    async def _claim(self, key: str, value: bytes, epoch: int) -> bool:
        """Write index `key` at the revision last written or read, unless an index of a newer
        owner is there; False then. The first of a life deletes the pages of other epochs."""
        cluster_queue = key.removeprefix(INDEX_PREFIX)
        if not await self._write_unless_newer(key, value, epoch, epoch_of):
            return False
        if (cluster_queue, epoch) not in self.claimed:
            await self._sweep_pages(cluster_queue, epoch)
            self.claimed.add((cluster_queue, epoch))  # swept: a failed sweep comes again
            self.late_sweeps[cluster_queue, epoch] = LATE_PAGE_SWEEPS
        return True

    async def _write_alone(self, key: str, value: bytes, epoch: int) -> None:
        """Write the status of a LocalQueue of no ClusterQueue unless a newer owner's is
        there; then stop writing it under this epoch."""
        if not await self._write_unless_newer(key, value, epoch, status_epoch):
            self.superseded_alone.add((key, epoch))
            self._forget_key(key)
            log.info("LocalQueue status %s: a newer owner writes it (ours: epoch %d)", key, epoch)

    async def _write_unless_newer(
        self, key: str, value: bytes, epoch: int, stored_epoch: Callable[[Entry | None], int]
    ) -> bool:
        """Write `key` at the revision last written or read, unless what is stored there
        carries an epoch larger than `epoch`; False then."""
        last = self.revisions.get(key)
        for _ in range(3):  # a write refused reads the key again; then the next flush will
            if last is None:
                entry = await self.kv.last_write(key)
                if stored_epoch(entry) > epoch:
                    return False
                last = 0 if entry is None else entry.revision
            try:
                self.revisions[key] = await self.kv.write(key, value, last=last)
            except Conflict:
                self.revisions.pop(key, None)
                last = None
                continue
            self._wrote(key, value, epoch)
            return True
        raise Conflict(key, 0)

    def _forget_key(self, key: str) -> None:
        """Remember nothing of `key`: another writer's now."""
        self.written.pop(key, None)
        self.written_epochs.pop(key, None)
        self.revisions.pop(key, None)

    def _wrote(self, key: str, value: bytes, epoch: int | None) -> None:
        advanced()  # the loop writing is not stalled (its pulse: bus/pulse.py)
        self.written[key] = value
        if epoch is not None:
            self.written_epochs[key] = epoch

    async def _update(self, cluster_queue: str, epoch: int, key: str, value: bytes) -> None:
        try:
            self.revisions[key] = await self.kv.write(key, value, last=self.revisions[key])
        except Conflict:
            if await self._stored_epoch(pending_index_key(cluster_queue)) > epoch:
                await self._give_up(cluster_queue, epoch)
                return
            if not await self._read_revision(key, epoch):
                return
            # Written since by a writer no newer (a former life of ours, an older owner's
            # write landing late): ours to write over.
            self.revisions[key] = await self.kv.write(key, value, last=self.revisions[key])
        self._wrote(key, value, epoch)

    async def _put(self, key: str, value: bytes) -> None:
        self.revisions[key] = await self.kv.put(key, value)
        self._wrote(key, value, None if self.fencing is None else self.fencing.epoch_of(key))

    async def _delete(self, key: str) -> None:
        """Delete `key` as this writer wrote it: written since by another, it is theirs."""
        with contextlib.suppress(Conflict):
            await self.kv.delete(
                key, self.revisions.get(key), forget_after_s=self.tombstones_kept_s
            )
        advanced()
        self._forget_key(key)

    async def _read_revision(self, key: str, epoch: int) -> bool:
        """Read the revision to write `key` at; False when it is a LocalQueue status a newer
        owner wrote (its LocalQueue left our ClusterQueue: deleted, or naming another), which
        we then stop writing under `epoch`."""
        entry = await self.kv.last_write(key)
        if key.startswith(LOCAL_QUEUE_PREFIX) and status_epoch(entry) > epoch:
            self.superseded_alone.add((key, epoch))
            self._forget_key(key)
            log.info("LocalQueue status %s: a newer owner writes it (ours: epoch %d)", key, epoch)
            return False
        self.revisions[key] = 0 if entry is None else entry.revision
        return True

    async def _stored_epoch(self, index: str) -> int:
        return epoch_of(await self.kv.last_write(index))

    async def _give_up(self, cluster_queue: str, epoch: int) -> None:
        """A newer owner writes `cluster_queue`: stop writing it, and delete our pages."""
        if (cluster_queue, epoch) in self.superseded:
            return
        self.superseded.add((cluster_queue, epoch))
        log.info(
            "ClusterQueue %s: a newer owner writes its views; this replica (epoch %d) stops",
            cluster_queue,
            epoch,
        )
        assert self.fencing is not None
        ours = [k for k in self.written if (self.fencing.fence(k) or ("",))[0] == cluster_queue]
        for key in ours:
            self._forget_key(key)
        await _together(self._forget(k) for k in ours if k.startswith(PAGE_PREFIX))

    async def _sweep_pages(self, cluster_queue: str, epoch: int) -> None:
        """Delete `cluster_queue`'s live pages that our index does not name and no newer owner
        wrote: of older epochs, and of ours but not written by us (a killed life's orphan)."""
        orphans = [
            k
            for k in await self._pages(cluster_queue)
            if page_epoch(k) < epoch or (page_epoch(k) == epoch and k not in self.written)
        ]
        await _together(self._forget(k) for k in orphans)

    async def sweep_late_pages(self) -> int:
        """Delete the live pages of older epochs of each ClusterQueue whose index this writer
        wrote under its current epoch, in the LATE_PAGE_SWEEPS sweeps after it did: an older
        owner's page put after our first index write swept (its writer killed before it read
        the move, which would have deleted it). No index names them; how many went. Each
        queue's pages are listed alone, so a sweep reads the queues this replica owns (their
        pages), not the bucket."""
        assert self.fencing is not None
        due = [
            (cq, epoch)
            for (cq, epoch) in list(self.late_sweeps)
            if (cq, epoch) not in self.superseded
            and self.fencing.fence(pending_index_key(cq)) == (cq, epoch)
        ]
        self.late_sweeps = {fence: self.late_sweeps[fence] for fence in due}  # the rest: gone
        listed = await _gathered(self._late_pages(*fence) for fence in due)
        late = [key for keys in listed for key in keys]
        await _together(self._forget(k) for k in late)
        for fence in due:  # a failed sweep raised above: it comes again
            self.late_sweeps[fence] -= 1
            if not self.late_sweeps[fence]:
                del self.late_sweeps[fence]
        return len(late)

    async def _late_pages(self, cluster_queue: str, epoch: int) -> list[str]:
        """`cluster_queue`'s live pages of epochs older than `epoch`."""
        return [k for k in await self._pages(cluster_queue) if page_epoch(k) < epoch]

    async def _pages(self, cluster_queue: str) -> list[str]:
        """The keys of `cluster_queue`'s live pages, whoever wrote them (SWEEPS_AT_ONCE
        listings at a time)."""
        async with self._sweeps:
            return list(await self.kv.snapshot(f"{PAGE_PREFIX}*.{cluster_queue}"))

    async def _forget(self, key: str) -> None:
        """Delete `key` whoever wrote it (a page no index names)."""
        await self.kv.delete(key, forget_after_s=self.tombstones_kept_s)
        advanced()

    async def sweep_legacy(self, listing: KeyListing, values: Mapping[str, bytes]) -> None:
        """Delete, once, the pending keys of the layout before indexes that a writer of
        before an upgrade left for the ClusterQueues whose index `values` now holds: readers
        prefer an index, but a stale page would outlive its queue (docs/events.md)."""
        if self.swept:
            return
        ours = {k.removeprefix(INDEX_PREFIX) for k in values if k.startswith(INDEX_PREFIX)}
        stale = [
            key
            for pattern, dots in _LEGACY
            for key in await listing.snapshot(pattern)
            if key.split(".", dots)[-1] in ours and key.count(".") >= dots
        ]
        await _together(self._forget(key) for key in stale)
        self.swept = True


def epoch_of(entry: Entry | None) -> int:
    """The epoch of a stored index (0: none, deleted, or written before epochs)."""
    if entry is None or not entry.value:
        return 0
    return services_pb2.PendingPageIndex.FromString(entry.value).epoch


def status_epoch(entry: Entry | None) -> int:
    """The epoch a stored LocalQueue status carries (0: none, deleted, written without one,
    or bytes that are no status: ours to write over)."""
    if entry is None or not entry.value:
        return 0
    try:
        return events_pb2.LocalQueueStatus.FromString(entry.value).epoch
    except DecodeError:
        return 0


def page_epoch(key: str) -> int:
    """The epoch of page key `pending-page.<epoch>-<id>.<cq>` (0: a page of before epochs,
    `pending-page.<id>.<cq>`, or a key not of that shape)."""
    epoch, dash, _ = key.removeprefix(PAGE_PREFIX).partition(".")[0].partition("-")
    return int(epoch) if dash and epoch.isdigit() else 0


async def _gathered(calls: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """What `calls` return, run side by side, each to its end; then raise the first failure."""
    waiting = list(calls)
    if len(waiting) <= 1:
        # Most writes delete nothing, or put no index; one arrival's page, or its one queue:
        # no task, and no turn of the loop, for them.
        return [await call for call in waiting]
    results = await asyncio.gather(*waiting, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]  # no exception among them: each a T


async def _together(*groups: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run `calls` side by side, each to its end; then raise the first failure."""
    await _gathered(call for calls in groups for call in calls)
