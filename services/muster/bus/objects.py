"""JetStream object-store buckets (`MUSTER_SNAPSHOTS`, `MUSTER_MANIFESTS`): named blobs in
chunks, with headers.

`ObjectBucket` opens its bucket when first needed (creating it only for a write) and raises
the bus's errors (errors.py): `NotFound` for an object that is not there or cannot be read
whole, `Unavailable` when NATS fails.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import NamedTuple

import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.object_store import ObjectStore

from muster.bus.errors import NotFound, wrapped


class StoredObject(NamedTuple):
    """An object in the bucket, as listed."""

    name: str
    headers: Mapping[str, list[str]]  # NATS headers: each a list of values


class ObjectBucket:
    """The object-store bucket `name` (on `replicas` servers when this creates it)."""

    def __init__(
        self,
        js: JetStreamContext,
        name: str,
        *,
        description: str = "",
        replicas: int = 1,
        chunk_bytes: int = 128 * 1024,
    ) -> None:
        self.name = name
        self._js = js
        self._description = description
        self._replicas = replicas
        self._chunk_bytes = chunk_bytes
        self._bucket: ObjectStore | None = None

    async def put(
        self, name: str, data: bytes, *, headers: Mapping[str, list[str]], description: str = ""
    ) -> None:
        """Store `data` as object `name`, replacing what it held (kept when a write fails)."""
        bucket = await self._open(create=True)
        assert bucket is not None
        meta = api.ObjectMeta(
            name=name,
            description=description,
            headers=dict(headers),
            options=api.ObjectMetaOptions(max_chunk_size=self._chunk_bytes),
        )
        with wrapped(f"{self.name} put {name}"):
            await bucket.put(name, data, meta=meta)

    async def list(self) -> list[StoredObject]:
        """Every live object (none when the bucket does not exist or is empty)."""
        bucket = await self._open(create=False)
        if bucket is None:
            return []
        try:
            with wrapped(f"{self.name} list"):
                infos = await bucket.list(ignore_deletes=True)
        except NotFound:  # an empty bucket
            return []
        return [StoredObject(info.name, dict(info.headers or {})) for info in infos]

    async def get(self, name: str) -> bytes:
        """Object `name` whole; `NotFound` when it is gone or does not read back as stored."""
        bucket = await self._open(create=False)
        if bucket is None:
            raise NotFound(f"{self.name}: no bucket")
        # Into a buffer: nats-py otherwise joins the chunks with `bytes +=`, quadratic in them.
        buffer = io.BytesIO()
        with wrapped(f"{self.name} get {name}"):
            try:
                await bucket.get(name, writeinto=buffer)
            except (nats.js.errors.DigestMismatchError, nats.js.errors.BadObjectMetaError) as exc:
                raise NotFound(f"{self.name} {name}: cannot be read: {exc!r}") from exc
        return buffer.getvalue()

    async def delete(self, name: str) -> None:
        """Remove object `name` (nothing when it or the bucket is not there)."""
        bucket = await self._open(create=False)
        if bucket is None:
            return
        try:
            with wrapped(f"{self.name} delete {name}"):
                await bucket.delete(name)
        except NotFound:
            return

    async def _open(self, *, create: bool) -> ObjectStore | None:
        if self._bucket is not None:
            return self._bucket
        try:
            with wrapped(f"object bucket {self.name}"):
                self._bucket = await self._js.object_store(self.name)
        except NotFound:
            if not create:
                return None
            # Two writers may create it at once: the server accepts an identical second one.
            config = api.ObjectStoreConfig(
                description=self._description,
                replicas=self._replicas,
                storage=api.StorageType.FILE,
            )
            with wrapped(f"object bucket {self.name}"):
                self._bucket = await self._js.create_object_store(self.name, config=config)
        return self._bucket
