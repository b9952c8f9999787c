"""The shard lease: key `admission.<shard>` in the `MUSTER_SHARDS` bucket (docs/services.md),
a `muster.bus.lease.Lease`: a replica decides for its shard only while it holds it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from muster.bus.buckets import SHARDS_BUCKET
from muster.bus.lease import (
    CAUSES,
    SUPERSEDED,
    Lease,
    LeaseLostError,
    LeaseRefusedError,
    LeaseStore,
)

log = logging.getLogger(__name__)

__all__ = [
    "CAUSES",
    "SHARDS_BUCKET",
    "SUPERSEDED",
    "LeaseLostError",
    "LeaseRefusedError",
    "ShardLease",
    "doubt_settled",
    "lease_key",
]


def lease_key(shard: int) -> str:
    return f"admission.{shard}"


class ShardLease(Lease):
    """Ownership of shard `shard` by `owner` (a host, process and instance); `timing` is
    `Lease`'s (`ttl_s`, `renew_s`, `poll_s`); `denied` is `Lease`'s too."""

    def __init__(
        self,
        kv: LeaseStore,
        *,
        shard: int,
        owner: str,
        denied: Sequence[Exception] = (),
        **timing: float,
    ) -> None:
        super().__init__(kv, key=lease_key(shard), owner=owner, denied=denied, **timing)


async def doubt_settled(why: str, guard: Callable[[], Awaitable[None]]) -> None:
    """After a takeover record of a later term than this replica's was read (`why`): raise
    LeaseLostError (cause superseded) unless `guard` confirms the lease is still this term's.
    It is then an older record: a bucket made anew numbers its revisions from 1 again."""
    try:
        await guard()
    except LeaseLostError as exc:
        raise LeaseLostError(f"{why} ({exc})", cause=SUPERSEDED) from exc
    log.warning("%s, yet the lease is still this term's (MUSTER_SHARDS made anew?)", why)
