"""The simulated API server: Kubernetes-shaped objects as JSON in KV bucket `MUSTER_SIM_<cluster>`.

`SimStore` gives get, optimistic create/update/delete, list and watch (resumable by revision,
the KV stream sequence). `SimBackend` and the sim kubelet are built on it; keys are in `keys.py`.
Every nats error leaves as a `ClusterError`.

A delete writes the KV tombstone with the object's last state as its body (the tombstone
header is what the KV protocol reads; the body is ignored by other KV clients), so a watch
resumed after a delete still reports what was deleted, as a Kubernetes watch does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from muster.bus.cancel import raise_if_cancelling
from muster.bus.client import stream_sequence
from muster.bus.errors import Conflict, Reject, Retry
from muster.cluster.backend import ChangeType
from muster.cluster.errors import ClusterError, ConflictError
from muster.cluster.keys import bucket_name, describe

_KV_OPERATION = "KV-Operation"  # KV protocol header: DEL or PURGE marks a tombstone
_EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"  # optimistic write: the key's last seq
_TOMBSTONES = ("DEL", "PURGE")
_WRONG_LAST_SEQUENCE = (10071, 10164)  # JetStream API error codes of a lost optimistic write
# A watch notices a lost consumer (NATS restarted) after about two missed heartbeats, then
# resumes after the last revision it delivered.
_HEARTBEAT_S = 1.0


class RawPublisher(Protocol):
    """Stores `data` on `subject` and returns its stream sequence (`muster.bus.Publisher`):
    raises the bus's Conflict, Retry or Reject."""

    async def publish_raw(self, subject: str, data: bytes, headers: dict[str, str]) -> int: ...


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
def nats_errors(key: str = "") -> Iterator[None]:
    """Raise every nats failure inside as a ClusterError (lost optimistic writes as conflicts)."""
    try:
        yield
    except nats.js.errors.KeyWrongLastSequenceError as exc:
        raise ConflictError(_described(key)) from exc
    except nats.js.errors.APIError as exc:
        if exc.err_code in _WRONG_LAST_SEQUENCE:
            raise ConflictError(_described(key)) from exc
        message = f"NATS: {exc}"
        raise ClusterError(_described(key), "Unavailable", message, temporary=True) from exc
    except (nats.errors.Error, TimeoutError) as exc:
        message = f"NATS: {type(exc).__name__}: {exc}".rstrip(": ")
        raise ClusterError(_described(key), "Unavailable", message, temporary=True) from exc


def _described(key: str) -> str:
    return describe(key) if key else ""


class SimStore:
    """Objects of one simulated cluster. Construct with `SimStore.open`."""

    def __init__(
        self,
        kv: KeyValue,
        *,
        js: JetStreamContext,
        bucket: str,
        publisher: RawPublisher | None = None,
    ) -> None:
        self._kv = kv
        self._js = js
        self._publisher = publisher
        self.bucket = bucket
        self._stream = f"KV_{bucket}"  # the KV protocol's stream and subject names
        self._subject_prefix = f"$KV.{bucket}."

    @classmethod
    async def open(
        cls, js: JetStreamContext, *, cluster: str, publisher: RawPublisher | None = None
    ) -> SimStore:
        """Return the store of `cluster`, creating its bucket when missing.

        Writes go through `publisher` when given (the bus's, `Bus.publisher`: about half the
        CPU of nats-py's JetStream publish per write), else through `js`.
        """
        bucket = bucket_name(cluster)
        with nats_errors():
            try:
                kv = await js.key_value(bucket)
            except nats.js.errors.BucketNotFoundError:
                kv = await js.create_key_value(bucket=bucket, history=1)
        return cls(kv, js=js, bucket=bucket, publisher=publisher)

    async def get(self, key: str) -> StoredObject | None:
        """Return the object at `key`, or None when there is none."""
        with nats_errors(key):
            try:
                entry = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                return None
        return StoredObject(key=key, obj=_decode(entry.value or b""), revision=entry.revision or 0)

    async def create(self, key: str, obj: dict[str, Any]) -> int:
        """Store a new object; raise ConflictError when one exists. Return its revision.

        A key whose last write is a tombstone is free (the KV protocol's create does the same).
        """
        data = _encode(obj)
        try:
            return await self._write(key, data, last=0)
        except ConflictError:
            tombstone = await self._tombstone_revision(key)
            if tombstone is None:
                raise
            return await self._write(key, data, last=tombstone)

    async def update(self, key: str, obj: dict[str, Any], *, revision: int) -> int:
        """Replace the object stored at `revision`; raise ConflictError if it changed since."""
        return await self._write(key, _encode(obj), last=revision)

    async def delete(self, stored: StoredObject) -> int:
        """Delete `stored` unless it changed since it was read (then ConflictError).

        The tombstone carries the object's last state (see the module docstring).
        """
        data = _encode(stored.obj)
        return await self._write(stored.key, data, last=stored.revision, operation="DEL")

    async def _write(self, key: str, data: bytes, *, last: int, operation: str = "") -> int:
        """Store `data` at `key` if `last` is still its last revision (0: none); the revision."""
        headers = {_EXPECTED_LAST: str(last)}
        if operation:
            headers[_KV_OPERATION] = operation
        subject = self._subject_prefix + key
        if self._publisher is None:
            with nats_errors(key):
                ack = await self._js.publish(subject, data, headers=headers)
            return ack.seq
        try:
            return await self._publisher.publish_raw(subject, data, headers)
        except Conflict as exc:
            raise ConflictError(_described(key)) from exc
        except Retry as exc:
            raise ClusterError(_described(key), "Unavailable", str(exc), temporary=True) from exc
        except Reject as exc:
            raise ClusterError(_described(key), "Invalid", str(exc)) from exc

    async def _tombstone_revision(self, key: str) -> int | None:
        """The revision of the tombstone that is `key`'s last write; None for a live object."""
        with nats_errors(key):
            try:
                await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError as exc:  # deleted: the entry is the tombstone
                entry = getattr(exc, "entry", None)
                return entry.revision if entry is not None and entry.revision else None
        return None

    async def last_revision(self) -> int:
        """Return the revision of the latest write to the bucket (0 when empty)."""
        with nats_errors():
            info = await self._js.stream_info(self._stream)
        return info.state.last_seq

    async def list(self, prefix: str = "") -> list[StoredObject]:
        """Return every object whose key starts with `prefix` (a whole token: "pod.ml."), by key.

        Lists the stream's subjects, then reads each key: a key written meanwhile is read at its
        newest, one deleted (a tombstone) is left out, and none that exists throughout is ever
        missed (a last-per-subject consumer cut off by its pending count could miss keys
        rewritten during the read).
        """
        with nats_errors():
            # The stream's own subject list: exact at one instant (a consumer's pending count
            # is not, while keys are being rewritten).
            info = await self._js.stream_info(
                self._stream, subjects_filter=f"{self._subject_prefix}{prefix}>"
            )
            subjects = (info.state.subjects or {}) if info.state else {}
            keys = [subject.removeprefix(self._subject_prefix) for subject in subjects]
            limit = asyncio.Semaphore(64)

            async def read(key: str) -> StoredObject | None:
                async with limit:
                    return await self.get(key)

            found = await asyncio.gather(*(read(k) for k in sorted(set(keys))))
        return [obj for obj in found if obj is not None]

    async def watch(
        self,
        *prefixes: str,
        from_revision: int = 0,
        on_skipped: Callable[[int], None] | None = None,
    ) -> AsyncGenerator[StoreChange, None]:
        """Yield the objects under `prefixes` (whole tokens: "pod.", "node."; none: every key) as
        ADDED, then every change, in revision order (one watch: changes of different prefixes
        come in the order they were written).

        With `from_revision` > 0 there is no initial list: only writes after that revision,
        each reported with the latest state of its key. See `ClusterBackend.watch` for the
        meaning of ADDED and MODIFIED (level-triggered). Never yields a revision twice.
        `on_skipped(revision)` is called for each write the watch read but does not yield (a
        tombstone of a key it never showed), so a caller can tell how far the watch has read.
        """
        resuming = from_revision > 0
        # Delivered through a callback into a queue: nats-py's `next_msg` makes a task and a
        # uuid per message, which costs more than the rest of a change together.
        arrived: asyncio.Queue[Msg] = asyncio.Queue()

        async def deliver(msg: Msg) -> None:
            arrived.put_nowait(msg)

        with nats_errors():
            if resuming:
                sub = await self._subscribe(
                    prefixes,
                    api.DeliverPolicy.BY_START_SEQUENCE,
                    start=from_revision + 1,
                    deliver=deliver,
                )
            else:
                sub = await self._subscribe(
                    prefixes, api.DeliverPolicy.LAST_PER_SUBJECT, deliver=deliver
                )
        shown: set[str] = set()
        last = from_revision
        try:
            while True:
                raise_if_cancelling()
                msg = await arrived.get()
                change = self._change(msg, shown, resuming=resuming)
                if change is None or change.revision <= last:
                    if on_skipped is not None:
                        on_skipped(stream_sequence(msg))
                    continue
                last = change.revision
                yield change
        finally:
            with contextlib.suppress(nats.errors.Error, ClusterError):
                await sub.unsubscribe()

    def _change(self, msg: Any, shown: set[str], *, resuming: bool) -> StoreChange | None:
        stored = self._stored(msg.subject, msg.data, stream_sequence(msg))
        change_type: ChangeType
        if _is_tombstone(msg.headers):
            # Outside a resume, a tombstone for a key this watch never showed is history.
            if stored.key not in shown and not resuming:
                return None
            shown.discard(stored.key)
            change_type = "DELETED"
        else:
            change_type = "MODIFIED" if stored.key in shown else "ADDED"
            shown.add(stored.key)
        return StoreChange(
            type=change_type, key=stored.key, obj=stored.obj, revision=stored.revision
        )

    async def _subscribe(
        self,
        prefixes: Sequence[str],
        policy: api.DeliverPolicy,
        *,
        deliver: Callable[[Msg], Awaitable[None]],
        start: int | None = None,
    ) -> JetStreamContext.PushSubscription:
        subjects = [f"{self._subject_prefix}{prefix}>" for prefix in prefixes or ("",)]
        config = api.ConsumerConfig(
            deliver_policy=policy,
            opt_start_seq=start,
            # One subject goes as the subscription's own filter; several as the consumer's.
            filter_subjects=subjects if len(subjects) > 1 else None,
        )
        return await self._js.subscribe(
            subjects[0],
            stream=self._stream,
            cb=deliver,
            config=config,
            ordered_consumer=True,
            inactive_threshold=60.0,
            idle_heartbeat=_HEARTBEAT_S,
        )

    def _stored(self, subject: str, data: bytes, revision: int) -> StoredObject:
        key = subject.removeprefix(self._subject_prefix)
        return StoredObject(key=key, obj=_decode(data), revision=revision)


def _is_tombstone(headers: dict[str, str] | None) -> bool:
    return headers is not None and headers.get(_KV_OPERATION) in _TOMBSTONES


def _encode(obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode(obj, order="sorted")


def _decode(data: bytes) -> dict[str, Any]:
    """Return a stored object; an empty body (a tombstone another client wrote) is {}."""
    return msgspec.json.decode(data, type=dict[str, Any]) if data else {}
