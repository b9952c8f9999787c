"""The rebuild's pieces: replaying stored events into the state, and the snapshots' bucket.

`replay_event` is the one path every stored event takes during a rebuild, a snapshot's and the
stream's alike: read as a fact, replayed into `AdmissionState`, kept in the `CompactLog`.
`restore` replays a snapshot that way.

`SnapshotStore` is the `MUSTER_SNAPSHOTS` object store bucket: object `admission-<shard>`
holds the last snapshot written by that shard's replica, its sequence in the object's headers.
Every replica folds the same stream, so any shard's snapshot can seed any replica: a rebuild
starts from the newest one it can read (`newest`).
"""

from __future__ import annotations

import io
import logging
from typing import Final

import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.object_store import ObjectStore

from muster.admission.snapshot import (
    CompactLog,
    Snapshot,
    SnapshotError,
    decode_snapshot,
    sequence_in,
    snapshot_headers,
)
from muster.admission.state import AdmissionState
from muster.admission.translate import fact_of
from muster.bus import Reject, decode
from muster.contracts.v1 import events_pb2 as pb

SNAPSHOTS_BUCKET: Final = "MUSTER_SNAPSHOTS"
# Chunks well under NATS's default max_payload (1 MiB): fewer round trips than nats-py's 128 KiB.
_CHUNK_BYTES: Final = 512 * 1024

log = logging.getLogger(__name__)


def replay_event(
    state: AdmissionState,
    env: pb.Envelope,
    *,
    history: CompactLog | None,
    data: bytes | None = None,
) -> None:
    """Replay one stored event (sequence set) into `state`, then keep it in `history` if the
    state depends on it (`data`: the event as stored; None: encoded again if kept)."""
    try:
        fact = fact_of(env)
    except ValueError as exc:
        log.warning("rebuild skips %s#%d: %s", env.type, env.sequence, exc)
        fact = None
    state.replay(fact, sequence=env.sequence, cluster=env.cluster)
    if history is not None:
        history.add(env, data)


def restore(
    state: AdmissionState,
    snapshot: Snapshot,
    *,
    history: CompactLog | None,
    max_event_bytes: int,
) -> None:
    """Replay `snapshot` into a new `state`: its finished workloads, then its events in order.

    Each event is decoded with the bus's checks; one it refuses is skipped, as a replay would.
    Afterwards `state.last_sequence` is the snapshot's: the stream is read on from the next.
    """
    state.ledger.remember_finished(snapshot.finished)
    for seq, data in zip(snapshot.sequences, snapshot.events, strict=True):
        try:
            env = decode(data, max_bytes=max_event_bytes)
        except Reject as err:
            log.warning("rebuild skips snapshot event #%d: %s", seq, err)
            continue
        env.sequence = seq
        replay_event(state, env, history=history, data=data)
    state.last_sequence = max(state.last_sequence, snapshot.sequence)


class SnapshotStore:
    """The snapshots' bucket, opened when first needed (created when first written)."""

    def __init__(self, js: JetStreamContext, *, replicas: int = 1) -> None:
        self._js = js
        self._replicas = replicas
        self._bucket: ObjectStore | None = None

    async def put(self, name: str, snapshot: Snapshot, data: bytes) -> None:
        """Store `data` (`snapshot` encoded) as object `name`, replacing what it held.

        Raises nats-py's errors; the object keeps its last snapshot when a write fails.
        """
        bucket = await self._open(create=True)
        assert bucket is not None
        meta = api.ObjectMeta(
            name=name,
            description=f"admission snapshot at sequence {snapshot.sequence}",
            headers=snapshot_headers(snapshot),
            options=api.ObjectMetaOptions(max_chunk_size=_CHUNK_BYTES),
        )
        await bucket.put(name, data, meta=meta)

    async def newest(self, *, stream: str, at_most: int) -> Snapshot | None:
        """The readable snapshot of the stream created at `stream` with the highest sequence
        up to `at_most` (the stream's last), or None.

        A snapshot that cannot be read is logged and the next newest is tried.
        """
        bucket = await self._open(create=False)
        if bucket is None:
            return None
        try:
            infos = await bucket.list(ignore_deletes=True)
        except nats.js.errors.NotFoundError:
            return None  # an empty bucket
        announced = ((sequence_in(i.headers, stream=stream), i.name) for i in infos)
        candidates = sorted(((s, name) for s, name in announced if s is not None), reverse=True)
        for seq, name in candidates:
            if seq > at_most:
                log.warning("snapshot %s is at sequence %d, past the stream's last (%d): ignored",
                            name, seq, at_most)  # fmt: skip
                continue
            try:
                snapshot = decode_snapshot(await self._download(bucket, name))
            except SnapshotError as exc:
                log.warning("snapshot %s ignored: %s", name, exc)
                continue
            if (snapshot.stream, snapshot.sequence) == (stream, seq):
                return snapshot
            log.warning("snapshot %s ignored: it is not what its headers say", name)
        return None

    @staticmethod
    async def _download(bucket: ObjectStore, name: str) -> bytes:
        # Into a buffer: nats-py otherwise joins the chunks with `bytes +=`, quadratic in them.
        buffer = io.BytesIO()
        try:
            await bucket.get(name, writeinto=buffer)
        except (
            nats.js.errors.DigestMismatchError,
            nats.js.errors.BadObjectMetaError,
            nats.js.errors.ObjectNotFoundError,  # deleted since it was listed
        ) as exc:
            raise SnapshotError(f"cannot be read: {exc!r}") from None
        return buffer.getvalue()

    async def _open(self, *, create: bool) -> ObjectStore | None:
        if self._bucket is None:
            try:
                self._bucket = await self._js.object_store(SNAPSHOTS_BUCKET)
            except nats.js.errors.BucketNotFoundError:
                if not create:
                    return None
                # Two replicas may create it at once: the server accepts an identical second one.
                config = api.ObjectStoreConfig(
                    description="admission snapshots (docs/services.md)",
                    replicas=self._replicas,
                    storage=api.StorageType.FILE,
                )
                self._bucket = await self._js.create_object_store(SNAPSHOTS_BUCKET, config=config)
        return self._bucket
