"""The shard lease: key `admission.<shard>` in the `MUSTER_SHARDS` bucket (docs/services.md),
a `muster.bus.lease.Lease`: a replica decides for its shard only while it holds it."""

from __future__ import annotations

from collections.abc import Sequence

from muster.bus.buckets import SHARDS_BUCKET
from muster.bus.lease import (
    CAUSES,
    SUPERSEDED,
    Lease,
    LeaseLostError,
    LeaseRefusedError,
    LeaseStore,
)

__all__ = [
    "CAUSES",
    "SHARDS_BUCKET",
    "SUPERSEDED",
    "LeaseLostError",
    "LeaseRefusedError",
    "ShardLease",
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
