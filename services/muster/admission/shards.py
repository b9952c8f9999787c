"""Which admission replica decides for a workload or a queue (docs/services.md, sharding).

A cohort tree is the unit that shares quota, so it is the unit that is sharded:
shard = crc32(tree) % shards, where tree is the engine's `tree_id` ("cohort/<root>" or
"cq/<name>"). A LocalQueue whose ClusterQueue is not known yet has no tree; its workloads
belong to crc32("queue:<namespace>/<name>") % shards until it has one.

A workload belongs to the shard of its declared LocalQueue, which routes it (docs/routing.md)
only among the alternatives in trees it owns too: it cannot count another shard's quota.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

from muster.api.model import Workload
from muster.core.engine import Engine


def shard_of(tree: str, *, shards: int) -> int:
    """The shard index (0 ≤ index < shards) that owns cohort tree `tree`."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return zlib.crc32(tree.encode()) % shards


def queue_placeholder(namespace: str, queue_name: str) -> str:
    """The stand-in tree name of a LocalQueue that has no cohort tree yet."""
    return f"queue:{namespace}/{queue_name or 'default'}"


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
    """Ownership questions for replica `shard` of `shards`, against the engine's config."""

    def __init__(self, engine: Engine, *, shard: int, shards: int) -> None:
        if not 0 <= shard < shards:
            raise ValueError(f"shard must be in [0, {shards}), got {shard}")
        self.engine = engine
        self.shard = shard
        self.shards = shards

    def owns_tree(self, tree: str) -> bool:
        return self.shards == 1 or shard_of(tree, shards=self.shards) == self.shard

    def owns_local_queue(self, namespace: str, queue_name: str) -> bool:
        """Whether this replica decides for workloads queued in `namespace/queue_name`."""
        if self.shards == 1:
            return True
        return self.owns_tree(tree_of_local_queue(self.engine, namespace, queue_name))

    def owns_cluster_queue(self, name: str) -> bool:
        """Whether this replica reports the status of ClusterQueue `name`."""
        if self.shards == 1:
            return True
        tree = tree_of_cluster_queue(self.engine, name)
        return tree is not None and self.owns_tree(tree)

    def foreign_alternatives(self, wl: Workload, *, keep: str = "") -> list[Foreign]:
        """The alternatives of `wl` whose LocalQueue lies in a tree another shard owns.

        `keep` names a LocalQueue the workload was routed to already: history stands even if
        a configuration change moved that tree since. An alternative whose LocalQueue or
        ClusterQueue does not exist yet is not foreign: routing reports it unusable itself.
        """
        if self.shards == 1:
            return []
        foreign = []
        for alternative in wl.alternatives:
            name = alternative.queue_name
            tree = self.engine.tree_of_queue(wl.meta.namespace, name)
            if tree is not None and name != keep and not self.owns_tree(tree):
                foreign.append(Foreign(name, tree, shard_of(tree, shards=self.shards)))
        return foreign
