"""What must exist on NATS before muster's services run: streams, buckets, the object store.

`ensure_stream` creates a stream or brings it up to date, and writes nothing when it already is,
so a service whose NATS user may only read it starts too. `setup_nats` creates everything the
services use, as the admin user (`muster nats-setup`; `muster run` does it before starting
them): with per-service users (muster.bus.permissions) the services then only bind to what
exists, and create nothing but their own consumers.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Final

import msgspec
import nats.js.errors
from nats.js import JetStreamContext, api

from muster.bus.buckets import (
    CLUSTERS_BUCKET,
    MANIFESTS_BUCKET,
    NAMES_BUCKET,
    PARTITIONS_BUCKET,
    SHARDS_BUCKET,
    SNAPSHOTS_BUCKET,
    VISIBILITY_BUCKET,
    WATCHER_BUCKET,
)
from muster.bus.errors import SetupError
from muster.bus.kv import open_bucket
from muster.bus.permissions import SIM_BUCKET_PREFIX, Deployment
from muster.bus.subjects import EVENTS_KEPT_S, stream_configs

DEFAULT_LEASE_TTL_S: Final = 5.0  # admission's --lease-ttl-seconds default


# How long a deleted visibility key's tombstone stays (docs/events.md, "Deleted keys leave"):
# no reader follows the bucket, and every fenced write reads or holds a revision younger than
# this, so after it a tombstone tells no one anything.
VISIBILITY_TOMBSTONES_KEPT_S: Final = 600.0
# How long a deleted LocalQueue's partition (MUSTER_PARTITIONS) and a cluster's heartbeat part
# past a shorter room's count (MUSTER_CLUSTERS) leave a tombstone. Their followers learn a
# delete live; one that missed it (its watch down longer than this) keeps a stale value that
# misleads no one: a workload published to a deleted LocalQueue's old partition is forwarded
# home by admission, and a part no head names is never read (docs/events.md, "Tombstones
# that expire").
FOLLOWED_TOMBSTONES_KEPT_S: Final = 600.0


class Bucket(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    ttl_s: float | None = None
    history: int = 1
    # Its writers delete with tombstones that expire after this long (None: kept, because a
    # follower learns deletions from them); `setup_nats` removes older ones left before.
    tombstones_kept_s: float | None = None


def buckets(deployment: Deployment, *, lease_ttl_s: float = DEFAULT_LEASE_TTL_S) -> list[Bucket]:
    """Every key-value bucket the services of `deployment` use, as they would create it."""
    return [
        Bucket(name=VISIBILITY_BUCKET, tombstones_kept_s=VISIBILITY_TOMBSTONES_KEPT_S),
        Bucket(name=SHARDS_BUCKET, ttl_s=lease_ttl_s),  # admission's leases expire
        Bucket(name=WATCHER_BUCKET),
        Bucket(name=CLUSTERS_BUCKET, tombstones_kept_s=FOLLOWED_TOMBSTONES_KEPT_S),
        # Each LocalQueue's admission partition.
        Bucket(name=PARTITIONS_BUCKET, tombstones_kept_s=FOLLOWED_TOMBSTONES_KEPT_S),
        # The gateways' claims of workload names: a name's `submitted` leaves MUSTER_EVENTS at
        # this age too, so an older claim decides nothing the stream could not (and the bucket
        # does not keep every name ever submitted).
        Bucket(name=NAMES_BUCKET, ttl_s=EVENTS_KEPT_S),
        *(Bucket(name=SIM_BUCKET_PREFIX + c) for c in deployment.simulated),
    ]


def differences(wanted: api.StreamConfig, actual: api.StreamConfig) -> list[str]:
    """The fields `wanted` sets to something other than what the server has."""
    theirs = actual.as_dict()
    return sorted(k for k, v in wanted.as_dict().items() if theirs.get(k) != v)


async def ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    """Create stream `config.name`, or update it when it differs; nothing if it is as wanted."""
    assert config.name is not None
    try:
        info = await js.stream_info(config.name)
    except nats.js.errors.NotFoundError:
        await _write(js.add_stream(config), f"create stream {config.name} (it is missing)")
        return
    changed = differences(config, info.config)
    if changed:
        what = f"update stream {config.name} ({', '.join(changed)} differ)"
        await _write(js.update_stream(config), what)


async def allow_message_ttls(js: JetStreamContext, stream: str) -> None:
    """Let `stream` take messages with their own TTL (a bucket made before nats-py set it):
    tombstones that expire. The server allows turning it on, never off."""
    info = await js.stream_info(stream)
    if not info.config.allow_msg_ttl:
        config = info.config
        config.allow_msg_ttl = True
        await _write(js.update_stream(config), f"update stream {stream} (allow_msg_ttl)")


async def _write(call: Awaitable[Any], what: str) -> None:
    try:
        await call
    except TimeoutError as exc:
        # A user without the right gets no answer at all: its request is dropped by the server.
        raise SetupError(
            f"cannot {what}: NATS did not answer; with per-service NATS users only the admin "
            "user may, so run `muster nats-setup` with it first (docs/security-nats.md)"
        ) from exc


async def setup_nats(
    js: JetStreamContext,
    *,
    deployment: Deployment,
    replicas: int = 1,
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
) -> list[str]:
    """Create or update muster's streams, buckets and object store; what exists afterwards."""
    done = []
    for config in stream_configs(replicas=replicas):
        await ensure_stream(js, config)
        done.append(f"stream {config.name}")
    for bucket in buckets(deployment, lease_ttl_s=lease_ttl_s):
        kv = await open_bucket(
            js, bucket.name, ttl_s=bucket.ttl_s, history=bucket.history, replicas=replicas
        )
        await allow_message_ttls(js, f"KV_{bucket.name}")
        done.append(f"key-value bucket {bucket.name}")
        if bucket.tombstones_kept_s is not None:
            forgotten = await kv.forget_deleted(older_than_s=bucket.tombstones_kept_s)
            if forgotten:
                done.append(f"{forgotten} old tombstones of {bucket.name} removed")
    stores = [(SNAPSHOTS_BUCKET, "admission snapshots (docs/services.md)")]
    stores += [
        (MANIFESTS_BUCKET.format(cluster=c), f"{c}'s manifests too large for their admission")
        for c in deployment.clusters
    ]
    for name, about in stores:
        try:
            await js.object_store(name)
        except nats.js.errors.BucketNotFoundError:
            store = api.ObjectStoreConfig(
                description=about, replicas=replicas, storage=api.StorageType.FILE
            )
            await js.create_object_store(name, config=store)
        done.append(f"object store {name}")
    return done
