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
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from muster.bus.cancel import raise_if_cancelling
from muster.cluster.backend import ChangeType
from muster.cluster.errors import ClusterError, ConflictError
from muster.cluster.sim.keys import bucket_name, describe

_KV_OPERATION = "KV-Operation"  # KV protocol header: DEL or PURGE marks a tombstone
_TOMBSTONES = ("DEL", "PURGE")
_WRONG_LAST_SEQUENCE = (10071, 10164)  # JetStream API error codes of a lost optimistic write
# A watch notices a lost consumer (NATS restarted) after about two missed heartbeats, then
# resumes after the last revision it delivered.
_HEARTBEAT_S = 1.0


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
    obj = describe(key) if key else ""
    try:
        yield
    except nats.js.errors.KeyWrongLastSequenceError as exc:
        raise ConflictError(obj) from exc
    except nats.js.errors.APIError as exc:
        if exc.err_code in _WRONG_LAST_SEQUENCE:
            raise ConflictError(obj) from exc
        raise ClusterError(obj, "Unavailable", f"NATS: {exc}", temporary=True) from exc
    except (nats.errors.Error, TimeoutError) as exc:
        message = f"NATS: {type(exc).__name__}: {exc}".rstrip(": ")
        raise ClusterError(obj, "Unavailable", message, temporary=True) from exc


class SimStore:
    """Objects of one simulated cluster. Construct with `SimStore.open`."""

    def __init__(self, kv: KeyValue, *, js: JetStreamContext, bucket: str) -> None:
        self._kv = kv
        self._js = js
        self.bucket = bucket
        self._stream = f"KV_{bucket}"  # the KV protocol's stream and subject names
        self._subject_prefix = f"$KV.{bucket}."

    @classmethod
    async def open(cls, js: JetStreamContext, *, cluster: str) -> SimStore:
        """Return the store of `cluster`, creating its bucket when missing."""
        bucket = bucket_name(cluster)
        with nats_errors():
            try:
                kv = await js.key_value(bucket)
            except nats.js.errors.BucketNotFoundError:
                kv = await js.create_key_value(bucket=bucket, history=1)
        return cls(kv, js=js, bucket=bucket)

    async def get(self, key: str) -> StoredObject | None:
        """Return the object at `key`, or None when there is none."""
        with nats_errors(key):
            try:
                entry = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                return None
        return StoredObject(key=key, obj=_decode(entry.value or b""), revision=entry.revision or 0)

    async def create(self, key: str, obj: dict[str, Any]) -> int:
        """Store a new object; raise ConflictError when one exists. Return its revision."""
        with nats_errors(key):
            return await self._kv.create(key, _encode(obj))

    async def update(self, key: str, obj: dict[str, Any], *, revision: int) -> int:
        """Replace the object stored at `revision`; raise ConflictError if it changed since."""
        with nats_errors(key):
            return await self._kv.update(key, _encode(obj), last=revision)

    async def delete(self, stored: StoredObject) -> int:
        """Delete `stored` unless it changed since it was read (then ConflictError).

        The tombstone carries the object's last state (see the module docstring).
        """
        headers = {
            _KV_OPERATION: "DEL",
            api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE: str(stored.revision),
        }
        with nats_errors(stored.key):
            ack = await self._js.publish(
                self._subject_prefix + stored.key, _encode(stored.obj), headers=headers
            )
        return ack.seq

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
        prefix: str = "",
        *,
        from_revision: int = 0,
        on_skipped: Callable[[int], None] | None = None,
    ) -> AsyncGenerator[StoreChange, None]:
        """Yield the objects under `prefix` as ADDED, then every change, in revision order.

        With `from_revision` > 0 there is no initial list: only writes after that revision,
        each reported with the latest state of its key. See `ClusterBackend.watch` for the
        meaning of ADDED and MODIFIED (level-triggered). Never yields a revision twice.
        `on_skipped(revision)` is called for each write the watch read but does not yield (a
        tombstone of a key it never showed), so a caller can tell how far the watch has read.
        """
        resuming = from_revision > 0
        with nats_errors():
            if resuming:
                sub = await self._subscribe(
                    prefix, api.DeliverPolicy.BY_START_SEQUENCE, start=from_revision + 1
                )
            else:
                sub = await self._subscribe(prefix, api.DeliverPolicy.LAST_PER_SUBJECT)
        shown: set[str] = set()
        last = from_revision
        try:
            while True:
                raise_if_cancelling()
                with nats_errors():
                    msg = await sub.next_msg(timeout=None)
                change = self._change(msg, shown, resuming=resuming)
                if change is None or change.revision <= last:
                    if on_skipped is not None:
                        on_skipped(msg.metadata.sequence.stream)
                    continue
                last = change.revision
                yield change
        finally:
            with contextlib.suppress(nats.errors.Error, ClusterError):
                await sub.unsubscribe()

    def _change(self, msg: Any, shown: set[str], *, resuming: bool) -> StoreChange | None:
        stored = self._stored(msg.subject, msg.data, msg.metadata)
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
        self, prefix: str, policy: api.DeliverPolicy, *, start: int | None = None
    ) -> JetStreamContext.PushSubscription:
        config = api.ConsumerConfig(deliver_policy=policy, opt_start_seq=start)
        return await self._js.subscribe(
            f"{self._subject_prefix}{prefix}>",
            stream=self._stream,
            config=config,
            ordered_consumer=True,
            inactive_threshold=60.0,
            idle_heartbeat=_HEARTBEAT_S,
        )

    def _stored(self, subject: str, data: bytes, metadata: Any) -> StoredObject:
        key = subject.removeprefix(self._subject_prefix)
        return StoredObject(key=key, obj=_decode(data), revision=metadata.sequence.stream)


def _is_tombstone(headers: dict[str, str] | None) -> bool:
    return headers is not None and headers.get(_KV_OPERATION) in _TOMBSTONES


def _encode(obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode(obj, order="sorted")


def _decode(data: bytes) -> dict[str, Any]:
    """Return a stored object; an empty body (a tombstone another client wrote) is {}."""
    return msgspec.json.decode(data, type=dict[str, Any]) if data else {}
