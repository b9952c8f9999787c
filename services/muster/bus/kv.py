"""JetStream key-value buckets (`MUSTER_VISIBILITY`, `MUSTER_SHARDS`, `MUSTER_SIM_<cluster>`).

`open_bucket` binds to a bucket, creating it first if it is missing, as a `Bucket`: reads,
writes, compare-and-set and watches, each raising the bus's errors (errors.py), never
nats-py's. A storage engine over the KV protocol (the simulated cluster's store, ADR 0005)
also gets a key's last write with tombstones, fenced raw writes whose tombstones carry a body,
the bucket's last revision, its keys under a prefix and an ordered change feed by revision.
`follow_bucket` hands every entry of a bucket to a callback, for as long as the service runs,
across NATS restarts.

Watches and change feeds read through `replay.read_in_order`: a reader of their own, not
nats-py's ordered push consumer. That one made a lost consumer again in a background task that
told a failure only to the connection's error callback, from the stream's first message when it
had delivered nothing yet (a feed handed on writes their key had replaced, in a bucket keeping
several), and took all the server sent whatever its reader's pace. A feed here knows its last
revision: when its consumer is gone (a restart) or skips a delivery, it makes a new one that
starts just after (before anything came: where the first one did), so it hands every write on
once, in revision order, however often NATS restarts; it holds at most a pull's batch not yet
taken. On a bucket from `Bus.kv`, each change feed and each `follow_bucket` reports to the
progress watchdog (bus/progress.py): a change in the caller's hands too long, or writes waiting
that never come, is a stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import inspect
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final, NamedTuple, Protocol

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from muster.bus.cancel import raise_if_cancelling
from muster.bus.errors import Conflict, NotFound, Retry, SetupError, Unavailable, wrapped
from muster.bus.progress import Progress, Tracker, tracked
from muster.bus.publisher import EXPECTED_LAST_SUBJECT_SEQUENCE, RawWriter
from muster.bus.replay import Read, read_in_order
from muster.bus.subjects import valid_key as valid_key  # where it was first

log = logging.getLogger(__name__)

_RETRY_S: Final = 1.0
_DELETED: Final = ("DEL", "PURGE")
_OPERATION: Final = "KV-Operation"  # the KV protocol's header marking a tombstone
_ROLLUP: Final = "Nats-Rollup"  # "sub": the message replaces every earlier one of its key
_TTL: Final = "Nats-TTL"  # the message's own age limit (nats-server 2.11, `allow_msg_ttl`)
_TTL_DISABLED: Final = 10166  # JetStream's err_code for a Nats-TTL the stream does not allow
_NO_MESSAGE: Final = (
    10037  # JetStream's err_code for a subject with no message (a last-message get)
)
# nats-server 2.11+ marks a key removed by a per-message TTL or its bucket's age this way.
_MARKER_REASON: Final = "Nats-Marker-Reason"
_MARKERS_DELETING: Final = ("MaxAge", "Purge", "Remove")


async def open_bucket(
    js: JetStreamContext,
    bucket: str,
    *,
    ttl_s: float | None = None,
    history: int = 1,
    replicas: int = 1,
    writer: RawWriter | None = None,
    progress: Progress | None = None,
) -> Bucket:
    """The bucket named `bucket`, created with `ttl_s` (None: keep forever), `history` and
    `replicas` (servers of a NATS cluster holding it; an existing bucket is left as it is).
    `Bucket.write` goes through `writer` when given (the bus's publisher), else through `js`;
    its watches and feeds report to `progress` when given (the service's watchdog)."""
    try:
        with wrapped(f"key-value bucket {bucket}"):
            kv = await js.key_value(bucket)
            return Bucket(kv, bucket, js=js, writer=writer, progress=progress)
    except NotFound:
        pass
    # Two processes may create it at once: the server accepts an identical second create.
    try:
        with wrapped(f"creating key-value bucket {bucket}"):
            kv = await js.create_key_value(
                bucket=bucket, ttl=ttl_s, history=history, replicas=replicas
            )
    except Unavailable as exc:
        if not isinstance(exc.__cause__, TimeoutError):
            raise
        # A user without the right to create it gets no answer at all.
        raise SetupError(
            f"cannot create key-value bucket {bucket} (it is missing): NATS did not answer; with "
            "per-service NATS users run `muster nats-setup` with the admin user first"
        ) from exc.__cause__
    return Bucket(kv, bucket, js=js, writer=writer, progress=progress)


class Entry(NamedTuple):
    """One key's value as stored; `value` None: deleted (or purged)."""

    key: str
    value: bytes | None
    revision: int
    created: float  # when the server stored it, in Unix seconds (0: not said)


class Change(NamedTuple):
    """One write as a change feed reads it; a tombstone (`deleted`) keeps the body it was
    written with (b"" from other KV clients)."""

    key: str
    data: bytes
    revision: int
    deleted: bool


class BucketStatus(NamedTuple):
    """How a bucket was made."""

    ttl_s: float | None  # None: values are kept forever
    history: int


def _entry(raw: KeyValue.Entry) -> Entry:
    deleted = raw.operation in _DELETED
    stamp: object = raw.created  # a datetime from a watch, whatever nats-py's annotation says
    created = stamp.timestamp() if isinstance(stamp, datetime.datetime) else 0.0
    return Entry(raw.key, None if deleted else (raw.value or b""), raw.revision or 0, created)


class Bucket:
    """A key-value bucket. Every method raises `Unavailable` when NATS fails or does not
    answer; `create` and `update` raise `Conflict` when the key's revision is not the one
    expected (it exists already, or another writer came first)."""

    def __init__(
        self,
        kv: KeyValue,
        name: str,
        *,
        js: JetStreamContext,
        writer: RawWriter | None = None,
        progress: Progress | None = None,
    ) -> None:
        self._kv = kv
        self._js = js
        self._writer = writer
        self._progress = progress
        self.name = name
        self._stream = f"KV_{name}"  # the KV protocol's stream and subject names
        self._prefix = f"$KV.{name}."
        self._ttl_refused = False  # the stream refused a tombstone's TTL: plain ones from then

    def _subject(self, key: str) -> str:
        return self._prefix + key

    async def get(self, key: str) -> Entry | None:
        """The live value of `key`; None when it is absent, deleted, or a name no key can have."""
        try:
            with wrapped(f"{self.name} get {key}"):
                raw = await self._kv.get(key)
        except NotFound:
            return None
        except Unavailable as exc:
            if isinstance(exc.__cause__, nats.js.errors.InvalidKeyError):
                return None
            raise
        return _entry(raw)

    async def put(self, key: str, value: bytes) -> int:
        """Store `value` under `key`; its revision."""
        with wrapped(f"{self.name} put {key}"):
            return await self._kv.put(key, value)

    async def create(self, key: str, value: bytes) -> int:
        """Store `value` under `key` only if the key has no live value; its revision."""
        with wrapped(f"{self.name} create {key}", subject=self._subject(key)):
            try:
                return await self._kv.create(key, value)
            except nats.js.errors.KeyNotFoundError as exc:
                # nats-py reads the key after a refused create (to tell a deleted one): gone by
                # then (its TTL ended in between), the create lost a race, as to another writer.
                raise Conflict(self._subject(key), 0) from exc

    async def update(self, key: str, value: bytes, last: int) -> int:
        """Store `value` under `key` only if its revision is still `last`; the new revision."""
        with wrapped(f"{self.name} update {key}", subject=self._subject(key), expected=last):
            return await self._kv.update(key, value, last=last)

    async def delete(
        self, key: str, last: int | None = None, *, forget_after_s: float | None = None
    ) -> None:
        """Delete `key` (only at revision `last` when given); deleting nothing is fine.

        With `forget_after_s`, the tombstone itself leaves the bucket after that long (a purge
        marker with its own TTL, whole seconds, at least 1), so the bucket holds no trace of
        a key deleted longer ago (docs/events.md, "Deleted keys leave"): only for a bucket no
        one needs to learn an older deletion from. A bucket made without `allow_msg_ttl`
        (before nats-py set it) gets a plain tombstone, and a warning once.
        """
        if forget_after_s is not None and not self._ttl_refused and valid_key(key):
            try:
                await self._purge(key, last, forget_after_s)
                return
            except Unavailable as exc:
                if getattr(exc.__cause__, "err_code", None) != _TTL_DISABLED:
                    raise
                self._ttl_refused = True
                log.warning(
                    "%s does not allow per-message TTLs: deleted keys stay as tombstones until "
                    '`muster nats-setup` updates it (docs/events.md, "Deleted keys leave")',
                    self.name,
                )
        try:
            with wrapped(
                f"{self.name} delete {key}", subject=self._subject(key), expected=last or 0
            ):
                await self._kv.delete(key, last=last)
        except NotFound:
            pass

    async def _purge(self, key: str, last: int | None, forget_after_s: float) -> None:
        headers = {_OPERATION: "PURGE", _ROLLUP: "sub", _TTL: f"{max(1, round(forget_after_s))}s"}
        if last:
            headers[EXPECTED_LAST_SUBJECT_SEQUENCE] = str(last)
        subject = self._subject(key)
        with wrapped(f"{self.name} delete {key}", subject=subject, expected=last or 0):
            await self._js.publish(subject, b"", headers=headers)

    async def forget_deleted(
        self, *, older_than_s: float, up_to_revision: int | None = None
    ) -> int:
        """Remove the tombstones written more than `older_than_s` ago (and, with
        `up_to_revision`, at or below it), each only while it is still its key's last write (a
        key written since keeps that write); how many. The compaction `delete(forget_after_s=
        ...)` makes needless, for tombstones left before."""
        markers: list[Entry] = []
        async with contextlib.aclosing(self.watch()) as entries:
            async for entry in entries:
                if entry is None:
                    break
                if entry.value is None:
                    markers.append(entry)
        now_s = time.time()
        old = [
            m
            for m in markers
            if now_s - m.created >= older_than_s
            and (up_to_revision is None or m.revision <= up_to_revision)
        ]
        for marker in old:
            with wrapped(f"{self.name} forget the deletion of {marker.key}"):
                # Below the next revision, on its key only: a write after it stays.
                await self._js.purge_stream(
                    self._stream, seq=marker.revision + 1, subject=self._subject(marker.key)
                )
        return len(old)

    async def status(self) -> BucketStatus:
        with wrapped(f"{self.name} status"):
            status = await self._kv.status()
        return BucketStatus(status.ttl, status.history)

    async def snapshot(self, pattern: str = ">", *, timeout_s: float = 5.0) -> dict[str, Entry]:
        """The live value of every key matching NATS subject `pattern` (`cq.>`), in one ordered
        pass over the latest of each (cheaper than keys then gets); `Unavailable` when no
        entry comes for `timeout_s` before the last."""
        found: dict[str, Entry] = {}
        entries = self.watch(pattern, timeout_s=timeout_s)
        try:
            async for entry in entries:
                if entry is None:  # every key read
                    break
                if entry.value is None:
                    found.pop(entry.key, None)
                else:
                    found[entry.key] = entry
        finally:
            await entries.aclose()
        return found

    def watch(
        self, pattern: str = ">", *, timeout_s: float | None = None, watched: str | None = None
    ) -> AsyncGenerator[Entry | None, None]:
        """Every stored entry matching `pattern`, then None (all read), then each change as it
        comes, until the caller stops, across NATS restarts (the module docstring);
        `Unavailable` when no entry comes for `timeout_s` (None: no limit). `watched`: the
        name the progress watchdog judges it by (a service's follow, never a short read).

        All is read once a delivery leaves nothing pending, or at once when the reader begins
        with nothing to deliver (told by the server as it makes the reader, before it
        delivers anything: nats-py's KeyWatcher asked afterwards, and a loaded server could
        answer before deliveries already made, so a snapshot read nothing).
        """
        tracker = self._tracker(watched)
        entries = self._watch(pattern, timeout_s=timeout_s, tracker=tracker)
        return entries if tracker is None else tracked(entries, tracker, _revision_of)

    async def _watch(
        self, pattern: str, *, timeout_s: float | None, tracker: Tracker | None
    ) -> AsyncGenerator[Entry | None, None]:
        what = f"{self.name} read {pattern}"
        reads = self._reads([self._subject(pattern)], after=None, tracker=tracker)
        loaded = False
        async with contextlib.aclosing(reads):
            while True:
                try:
                    async with asyncio.timeout(timeout_s):
                        read = await anext(reads)
                except TimeoutError:
                    raise Unavailable(f"{what}: nothing came for {timeout_s:g}s") from None
                if read is None:
                    entry, at = None, None
                else:
                    entry, at = self._entry_of(read[0]), read[1]
                if entry is not None:
                    yield entry
                if not loaded and (at is None or at.pending == 0):
                    loaded = True
                    yield None

    def _entry_of(self, msg: Msg) -> Entry | None:
        """A watch's delivery as an `Entry`; None for a server marker of a kind not known
        (nats-py's KeyWatcher skips those too)."""
        headers = msg.headers or {}
        deleted = headers.get(_OPERATION) in _DELETED
        reason = headers.get(_MARKER_REASON)
        if reason is not None:
            if reason not in _MARKERS_DELETING:
                return None
            deleted = True
        meta = msg.metadata
        created = meta.timestamp.timestamp() if meta.timestamp is not None else 0.0
        key = msg.subject.removeprefix(self._prefix)
        return Entry(key, None if deleted else msg.data, meta.sequence.stream, created)

    # --- a storage engine's view of the KV protocol --------------------------------------------

    async def last_write(self, key: str) -> Entry | None:
        """`key`'s last write, a tombstone included (`value` None); None when never written."""
        try:
            with wrapped(f"{self.name} get {key}"):
                raw = await self._kv.get(key)
        except NotFound as exc:
            tombstone = getattr(exc.__cause__, "entry", None)  # set when the key was deleted
            return None if tombstone is None else _entry(tombstone)._replace(value=None)
        return _entry(raw)

    async def write(self, key: str, data: bytes, *, last: int, deleting: bool = False) -> int:
        """Store `data` at `key` only while `last` is its last revision (0: never written), as
        a tombstone carrying `data` when `deleting`; the new revision. `Conflict` when `last`
        is no longer the last; `Reject` when the server refuses the message (too large)."""
        headers = {EXPECTED_LAST_SUBJECT_SEQUENCE: str(last)}
        if deleting:
            headers[_OPERATION] = "DEL"
        subject = self._subject(key)
        if self._writer is not None:
            try:
                return await self._writer.publish_raw(subject, data, headers)
            except Retry as exc:
                raise Unavailable(f"{self.name} write {key}: {exc}") from exc
        with wrapped(f"{self.name} write {key}", subject=subject, expected=last):
            ack = await self._js.publish(subject, data, headers=headers)
        return ack.seq

    async def last_revision(self, *prefixes: str) -> int:
        """The revision of the bucket's latest write (0: none yet); with `prefixes` (whole
        tokens: "pod."), of the latest under any of them, the last a `changes(*prefixes)`
        reads (one request per prefix)."""
        if not prefixes:
            with wrapped(f"{self.name} last revision"):
                info = await self._js.stream_info(self._stream)
            return int(info.state.last_seq)
        lasts = await asyncio.gather(*map(self._last_under, prefixes))
        return max(lasts)

    async def _last_under(self, prefix: str) -> int:
        """The revision of the latest write under `prefix` (0: none)."""
        with wrapped(f"{self.name} last revision {prefix}"):
            try:
                msg = await self._js.get_last_msg(self._stream, f"{self._prefix}{prefix}>")
            except nats.js.errors.NotFoundError as exc:
                if exc.err_code != _NO_MESSAGE:
                    raise  # the bucket itself is gone
                return 0
        return int(msg.seq or 0)

    async def keys(self, prefix: str = "") -> list[str]:
        """Every key whose last write starts with `prefix` (whole tokens: "pod.ml."), tombstones
        included, sorted: the stream's own subject list, exact at one instant."""
        with wrapped(f"{self.name} keys {prefix}"):
            info = await self._js.stream_info(
                self._stream, subjects_filter=f"{self._prefix}{prefix}>"
            )
        subjects = (info.state.subjects or {}) if info.state else {}
        return sorted(subject.removeprefix(self._prefix) for subject in subjects)

    async def changes(
        self,
        *prefixes: str,
        after: int | None = None,
        on_caught_up: Callable[[], None] | None = None,
    ) -> AsyncGenerator[Change, None]:
        """Each key under `prefixes` (whole tokens; none: every key) at its last write, then
        every write as it comes, in revision order across prefixes; with `after` (a revision),
        every write after it instead. Until the caller stops, across NATS restarts: each
        revision once, none left out (the module docstring). `on_caught_up()` is called once,
        between changes, when those yielded hold every one stored when the read began.

        Each change is in hand for the progress watchdog until the next is asked for (as
        `progress.tracked` says), tracked here: a wrapping generator costs a resumption more
        per change, on every feed of every service."""
        subjects = [f"{self._prefix}{prefix}>" for prefix in prefixes or ("",)]
        tracker = self._tracker(f"{self.name} changes {' '.join(prefixes) or '>'}")
        reads = self._reads(subjects, after=after, tracker=tracker)
        to_tell = [on_caught_up] if on_caught_up is not None else []  # once
        try:
            async for read in reads:
                if read is None:
                    if to_tell:
                        to_tell.pop()()
                    continue
                msg, at = read
                headers = msg.headers
                deleted = headers is not None and headers.get(_OPERATION) in _DELETED
                key = msg.subject.removeprefix(self._prefix)
                change = Change(key, msg.data, at.stream, deleted)
                if tracker is None:
                    yield change
                else:
                    tracker.began(change.revision)
                    yield change
                    tracker.ended(change.revision)
                if at.pending == 0 and to_tell:
                    to_tell.pop()()
        finally:
            await reads.aclose()
            if tracker is not None:
                tracker.close()

    def _reads(
        self, subjects: list[str], *, after: int | None, tracker: Tracker | None
    ) -> AsyncGenerator[Read, None]:
        """The bucket's messages on `subjects` in order (`read_in_order`), from each key's last
        (`after` None) or after revision `after`; `tracker` is told each reader's name."""
        return read_in_order(
            self._js._nc,  # nats-py's own connection: the reader pulls through it
            self._js,
            subjects,
            stream=self._stream,
            start=None if after is None else after + 1,
            tracker=tracker,
        )

    def _tracker(self, watched: str | None) -> Tracker | None:
        """A tracker named `watched` on the bucket's progress board, if it has one."""
        if watched is None or self._progress is None:
            return None
        return self._progress.track(watched, stream=self._stream, consumer="", max_ack_pending=1)


def _revision_of(item: Entry | None) -> int:
    return 0 if item is None else item.revision


class OpenBucket(Protocol):
    """`Bus.kv`: the bucket of that name, created when missing."""

    async def __call__(self, bucket: str) -> Bucket: ...


# A key and its value (None: the key was deleted); may be a coroutine function.
OnEntry = Callable[[str, bytes | None], Awaitable[None] | None]


async def follow_bucket(
    open_bucket: OpenBucket,
    bucket: str,
    on_entry: OnEntry,
    *,
    on_loaded: Callable[[], Awaitable[None] | None] | None = None,
) -> None:
    """Hand every entry of `bucket` to `on_entry`: the stored ones (then `on_loaded()`), then
    each change, until cancelled. The watch reads on across NATS restarts; a bucket that cannot
    be opened (or a watch that fails) is tried again a second later, from the stored values,
    so callers must take a repeated entry as news."""
    while True:
        raise_if_cancelling()
        try:
            kv = await open_bucket(bucket)
            entries = kv.watch(watched=f"{bucket} follow")
            try:
                # Setting up the watch may have swallowed a cancellation (bus/cancel.py), and
                # with nothing written to the bucket the loop below would never look again.
                async for entry in entries:
                    raise_if_cancelling()
                    if entry is None:  # the stored values are all in
                        loaded = on_loaded() if on_loaded is not None else None
                        if inspect.isawaitable(loaded):
                            await loaded
                        continue
                    done = on_entry(entry.key, entry.value)
                    if inspect.isawaitable(done):
                        await done
            finally:
                await entries.aclose()
        except (Unavailable, NotFound) as exc:
            log.warning("%s not followed, again in %gs: %r", bucket, _RETRY_S, exc)
        await asyncio.sleep(_RETRY_S)
