"""Which admission replica decides for a workload or a queue (docs/services.md, sharding).

A cohort tree is the unit that shares quota, so it is the unit that is sharded. A tree (the
engine's `tree_id`: "cohort/<root>" or "cq/<name>") lies in partition crc32(tree) % 16
(`muster.bus.partitions`), and a partition is decided by one shard: partition % shards, unless
a `config.partition` record moved it (`PartitionMap`). A LocalQueue whose ClusterQueue is not
known yet has no tree; it stands for the tree "queue:<namespace>/<name>" until it has one.

A workload belongs to the shard of its LocalQueue's partition, which routes it
(docs/routing.md) only among the alternatives in partitions it decides too: it cannot count
another shard's quota.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from muster.api.model import Workload
from muster.bus.partitions import PARTITIONS, partition_of, queue_tree, shard_of_partition
from muster.core.engine import Engine


def shard_of(tree: str, *, shards: int) -> int:
    """The shard index (0 ≤ index < shards) deciding cohort tree `tree` when no record moved
    its partition."""
    return shard_of_partition(partition_of(tree), shards=shards)


def queue_placeholder(namespace: str, queue_name: str) -> str:
    """The stand-in tree name of a LocalQueue that has no cohort tree yet."""
    return queue_tree(namespace, queue_name)


class PartitionMap:
    """Which shard decides each partition: partition % shards, unless a record moved it."""

    def __init__(self, *, shards: int, moved: Mapping[int, int] | None = None) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self.shards = shards
        self.moved: dict[int, int] = dict(moved or {})

    def shard_of(self, partition: int) -> int:
        return self.moved.get(partition, shard_of_partition(partition, shards=self.shards))

    def owned(self, shard: int) -> frozenset[int]:
        """The partitions shard `shard` decides."""
        return frozenset(p for p in range(PARTITIONS) if self.shard_of(p) == shard)

    def move(self, partition: int, shard: int) -> None:
        """From now on shard `shard` decides `partition` (a record); a shard this replica's
        `--shards` does not count is kept as written (nobody here decides it)."""
        self.moved[partition] = shard


def tree_of_local_queue(engine: Engine, namespace: str, queue_name: str) -> str:
    """The cohort tree serving LocalQueue `namespace/queue_name`, or its stand-in."""
    tree = engine.tree_of_queue(namespace, queue_name)
    return tree if tree is not None else queue_placeholder(namespace, queue_name)


def tree_of_cluster_queue(engine: Engine, name: str) -> str | None:
    """The cohort tree ClusterQueue `name` belongs to, or None when it does not exist."""
    return engine.tree_of_cluster_queue(name)


class Foreign(NamedTuple):
    """An alternative whose cohort tree another shard decides."""

    queue_name: str  # the alternative's LocalQueue
    tree: str
    shard: int

    def __str__(self) -> str:
        return (
            f"LocalQueue {self.queue_name} (cohort tree {self.tree} is decided by admission "
            f"shard {self.shard})"
        )


class Sharding:
    """Ownership questions for replica `shard`, against the engine's config and `partitions`."""

    def __init__(self, engine: Engine, *, shard: int, partitions: PartitionMap) -> None:
        if not 0 <= shard < partitions.shards:
            raise ValueError(f"shard must be in [0, {partitions.shards}), got {shard}")
        self.engine = engine
        self.shard = shard
        self.partitions = partitions
        self.owned = partitions.owned(shard)  # `refresh` after a record moved one

    @property
    def shards(self) -> int:
        return self.partitions.shards

    def refresh(self) -> bool:
        """Take a moved partition into account; whether this replica's partitions changed."""
        owned = self.partitions.owned(self.shard)
        if owned == self.owned:
            return False  # the same object kept: the visibility renderer restarts on a new one
        self.owned = owned
        return True

    def owns_tree(self, tree: str) -> bool:
        return partition_of(tree) in self.owned

    def partition_of_local_queue(self, namespace: str, queue_name: str) -> int:
        """The partition of the tree serving `namespace/queue_name` (or of its stand-in)."""
        return partition_of(tree_of_local_queue(self.engine, namespace, queue_name))

    def owns_local_queue(self, namespace: str, queue_name: str) -> bool:
        """Whether this replica decides for workloads queued in `namespace/queue_name`."""
        return self.partition_of_local_queue(namespace, queue_name) in self.owned

    def owns_cluster_queue(self, name: str) -> bool:
        """Whether this replica reports the status of ClusterQueue `name`."""
        if len(self.owned) == PARTITIONS:
            return True
        tree = tree_of_cluster_queue(self.engine, name)
        return tree is not None and self.owns_tree(tree)

    def foreign_alternatives(self, wl: Workload, *, keep: str = "") -> list[Foreign]:
        """The alternatives of `wl` whose LocalQueue lies in a tree another shard owns.

        `keep` names a LocalQueue the workload was routed to already: history stands even if
        a configuration change moved that tree since. An alternative whose LocalQueue or
        ClusterQueue does not exist yet is not foreign: routing reports it unusable itself.
        """
        foreign = []
        for alternative in wl.alternatives:
            name = alternative.queue_name
            tree = self.engine.tree_of_queue(wl.meta.namespace, name)
            if tree is not None and name != keep and not self.owns_tree(tree):
                shard = self.partitions.shard_of(partition_of(tree))
                foreign.append(Foreign(name, tree, shard))
        return foreign
