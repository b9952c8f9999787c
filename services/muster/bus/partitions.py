"""Admission partitions: which admission replica reads and decides which workloads' events.

A cohort tree (docs/services.md, "Admission sharding") lies in partition
`crc32(tree) % PARTITIONS`, the same in every installation and for ever; a LocalQueue that no
configuration names yet stands for a tree of its own, `queue:<namespace>/<name>`. Each
partition is decided by one admission shard (by default `partition % shards`; a
`config.partition` record moves it). Every event about a Kueue workload carries the partition
of its LocalQueue's tree in `Envelope.partition`, which is the last token of its subject, so an
admission replica's consumer asks the server for its own partitions' events only.

Who publishes the first event about a workload (the gateway, the watcher) finds its LocalQueue's
partition in the `MUSTER_PARTITIONS` bucket, which admission keeps (`QueuePartitions` follows
it); every later event takes the partition of the event that caused it (`new_event`), or of the
pod it reports on (label `muster.dev/partition`). A LocalQueue the bucket does not know yet gets
its stand-in tree's partition: admission forwards what lands in the wrong partition.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from typing import Final

from muster.bus.buckets import PARTITIONS_BUCKET
from muster.bus.kv import OpenBucket, follow_bucket

PARTITIONS: Final = 16  # of the contract: changing it moves every tree (docs/events.md)
PARTITION_LABEL: Final = "muster.dev/partition"  # on the pods muster starts for a workload
_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


def partition_of(tree: str) -> int:
    """The partition (0 ≤ p < PARTITIONS) of cohort tree `tree` ("cohort/<root>", "cq/<name>"
    or a LocalQueue's stand-in `queue_tree`)."""
    return zlib.crc32(tree.encode()) % PARTITIONS


def queue_tree(namespace: str, queue_name: str) -> str:
    """The stand-in tree of LocalQueue `namespace/queue_name` while it belongs to no tree."""
    return f"queue:{namespace}/{queue_name or 'default'}"


def token(partition: int | None) -> str:
    """`partition` as the envelope and the subject write it ("" for none)."""
    return "" if partition is None else str(partition)


def parse_token(value: str) -> int | None:
    """The partition an envelope names, or None for none or one this version cannot read."""
    if not value.isdigit():
        return None
    partition = int(value)
    return partition if partition < PARTITIONS else None


def shard_of_partition(partition: int, *, shards: int) -> int:
    """The shard deciding `partition` when no record moved it."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return partition % shards


def queue_key(namespace: str, queue_name: str) -> str:
    """The bucket key of LocalQueue `namespace/queue_name`: `lq.<namespace>.<name>`, every
    character outside [A-Za-z0-9-] written as `=` and its UTF-8 bytes in hex."""
    return f"lq.{_escape(namespace)}.{_escape(queue_name or 'default')}"


def _escape(name: str) -> str:
    return _UNSAFE.sub(lambda m: "".join(f"={b:02X}" for b in m.group().encode()), name)


class QueuePartitions:
    """Each LocalQueue's partition as admission wrote it in `MUSTER_PARTITIONS`, followed live.

    `of(namespace, queue)` answers from memory: the bucket's partition, or that of the queue's
    stand-in tree when the bucket has none (yet).
    """

    def __init__(self) -> None:
        self._known: dict[str, int] = {}
        self.loaded = asyncio.Event()  # set once the stored keys have all been read

    def of(self, namespace: str, queue_name: str) -> str:
        """The partition token of a workload queued in `namespace/queue_name`."""
        known = self._known.get(queue_key(namespace, queue_name))
        if known is None:
            known = partition_of(queue_tree(namespace, queue_name))
        return token(known)

    def learn(self, key: str, value: bytes | None) -> None:
        """Take one bucket entry (None or empty: deleted)."""
        partition = parse_token(value.decode(errors="replace")) if value else None
        if partition is None:
            self._known.pop(key, None)
        else:
            self._known[key] = partition

    async def follow(self, open_bucket: OpenBucket) -> None:
        """Follow the bucket until cancelled, again after any NATS error."""
        await follow_bucket(open_bucket, PARTITIONS_BUCKET, self.learn, on_loaded=self.loaded.set)
