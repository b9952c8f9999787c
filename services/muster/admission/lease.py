"""The shard lease: key `admission.<shard>` in the `MUSTER_SHARDS` bucket (docs/services.md).

The bucket's TTL (5 s by default) makes a lease expire when its owner stops renewing it.
`acquire` creates the key if absent and otherwise waits; `hold` renews it every second with a
compare-and-set on its revision, and raises `LeaseLostError` when that fails (someone else owns it
now) or when no renewal succeeded for a whole TTL (NATS unreachable: assume it expired).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Final, Protocol

import nats.errors
import nats.js.errors

from muster.bus.cancel import raise_if_cancelling

SHARDS_BUCKET: Final = "MUSTER_SHARDS"

log = logging.getLogger(__name__)


class LeaseLostError(RuntimeError):
    """This replica no longer owns its shard: it must stop deciding at once."""


class LeaseStore(Protocol):
    """The compare-and-set operations of a JetStream key-value bucket that a lease needs."""

    async def create(self, key: str, value: bytes) -> int: ...

    async def update(self, key: str, value: bytes, last: int | None = None) -> int: ...

    async def delete(self, key: str, last: int | None = None) -> bool: ...


def lease_key(shard: int) -> str:
    return f"admission.{shard}"


class ShardLease:
    """Ownership of one shard by `owner`, renewed every `renew_s` while `hold` runs."""

    def __init__(
        self,
        kv: LeaseStore,
        *,
        shard: int,
        owner: str,
        ttl_s: float = 5.0,
        renew_s: float = 1.0,
        poll_s: float = 0.5,
    ) -> None:
        if not 0 < renew_s < ttl_s:
            raise ValueError(f"lease renewal ({renew_s:g}s) must be shorter than its TTL")
        self.kv = kv
        self.key = lease_key(shard)
        self.owner = owner
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self.poll_s = poll_s
        self.revision: int | None = None

    @property
    def held(self) -> bool:
        return self.revision is not None

    async def acquire(self) -> None:
        """Wait until this replica owns the shard (the previous owner's lease expired)."""
        waiting = False
        while True:
            raise_if_cancelling()  # nats-py may swallow a cancellation (3.11)
            try:
                self.revision = await self.kv.create(self.key, self.owner.encode())
            except nats.js.errors.KeyWrongLastSequenceError:
                if not waiting:
                    log.info("shard lease %s is held by another replica; waiting", self.key)
                    waiting = True
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("cannot reach the shard lease %s: %r", self.key, exc)
            else:
                log.info("acquired shard lease %s as %s", self.key, self.owner)
                return
            await asyncio.sleep(self.poll_s)

    async def hold(self) -> None:
        """Renew the lease until cancelled; raise LeaseLostError when it cannot be renewed."""
        renewed_at = time.monotonic()
        while True:
            raise_if_cancelling()  # nats-py may swallow a cancellation (3.11)
            await asyncio.sleep(self.renew_s)
            try:
                self.revision = await self.kv.update(
                    self.key, self.owner.encode(), last=self.revision
                )
            except nats.js.errors.KeyWrongLastSequenceError as exc:
                self.revision = None
                raise LeaseLostError(f"shard lease {self.key} was taken over") from exc
            except (nats.errors.Error, TimeoutError) as exc:
                if time.monotonic() - renewed_at >= self.ttl_s - self.renew_s:
                    self.revision = None
                    raise LeaseLostError(f"shard lease {self.key} not renewed for a TTL") from exc
                log.warning("shard lease %s not renewed: %r", self.key, exc)
            else:
                renewed_at = time.monotonic()

    async def release(self) -> None:
        """Give the lease up (clean shutdown), so that a successor need not wait for the TTL."""
        if self.revision is None:
            return
        revision, self.revision = self.revision, None
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await self.kv.delete(self.key, last=revision)
