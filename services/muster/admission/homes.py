"""Where each workload's events are stored, and what follows it when that changes. Pure.

A workload's home is the partition (`muster.bus.partitions`) of the cohort tree of the
LocalQueue it is in now: where it was routed, else as declared; a LocalQueue without a tree
stands for one of its own. Its events are stored there (`Envelope.partition`), so the replica
deciding a partition reads, rebuilds from and hands over exactly its workloads. When a home
changes, the workload's story follows it (docs/events.md, "Partitions"):

- a `Move`: this replica has the workload's events and forwards them, each as it was stored,
  to the new home. It happens after a route to another partition, a configuration change that
  moves the LocalQueue to another partition, or a `submitted` published in the wrong one (its
  publisher did not know the LocalQueue's partition yet). When another replica decides the new
  home, the workload stays here, away: what still arrives about it here is forwarded too;
- a `Handover`: a configuration change moved a LocalQueue of a tree from a partition another
  replica decides into one of ours. We fence that partition (a `config.partition` record that
  its decider's later decisions about it fail on) and read its workloads' stories from that
  partition's history ourselves, before deciding: the other replica may be gone, and the
  quota its workloads hold must be counted here at once.

A forwarded story is taken only by a replica that does not know the workload yet, so forwarding
one again (a replica restarted before it knew it had) changes nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from muster.api.model import WorkloadKey
from muster.bus import partitions as bucket
from muster.bus.partitions import partition_of, queue_tree
from muster.core.engine import Engine


class Move(NamedTuple):
    """Forward `key`'s story to partition `to_partition` (its home now)."""

    key: WorkloadKey
    to_partition: int


class Handover(NamedTuple):
    """Fetch, from `from_partition`'s history, the stories of LocalQueue `local_queue`'s
    workloads (its home is `to_partition` now, one of ours)."""

    local_queue: str  # "<namespace>/<name>"
    from_partition: int
    to_partition: int


class Home(NamedTuple):
    partition: int
    in_tree: bool  # False: the LocalQueue has no tree (yet): its stand-in's partition


def queue_key(namespace: str, queue_name: str) -> str:
    return f"{namespace}/{queue_name or 'default'}"


def stand_in(local_queue: str) -> Home:
    """The home of LocalQueue `namespace/name` while it has no tree."""
    namespace, _, name = local_queue.partition("/")
    return Home(partition_of(queue_tree(namespace, name)), in_tree=False)


class QueueHomes:
    """The home of every configured LocalQueue, to tell which ones a configuration change moved.

    `update(engine)` after each change to LocalQueues, ClusterQueues or Cohorts returns the
    LocalQueues whose home changed, with their home before and after. `version` moves when
    any home changed, so that the bucket of homes is written only then (`HomesOut`).
    """

    def __init__(self) -> None:
        self.homes: dict[str, Home] = {}
        self.version = 0

    def home_of(self, local_queue: str) -> Home:
        return self.homes.get(local_queue) or stand_in(local_queue)

    def update(self, engine: Engine) -> dict[str, tuple[Home, Home]]:
        homes: dict[str, Home] = {}
        for namespace, name in engine.local_queue_keys():
            tree = engine.tree_of_queue(namespace, name)
            key = queue_key(namespace, name)
            homes[key] = stand_in(key) if tree is None else Home(partition_of(tree), True)
        before, self.homes = self.homes, homes
        if homes != before:
            self.version += 1
        moved: dict[str, tuple[Home, Home]] = {}
        for key in before.keys() | homes.keys():
            old, new = before.get(key) or stand_in(key), homes.get(key) or stand_in(key)
            if old.partition != new.partition:
                moved[key] = (old, new)
        return moved


class HomesOut:
    """Which homes the `MUSTER_PARTITIONS` bucket is owed: every replica writes them all, and
    they change only with the configuration, so the views' writes (several a second) compare
    them only after a change, not each time over every LocalQueue of every shard."""

    def __init__(self) -> None:
        self._written = -1  # the `QueueHomes.version` last written in full; none yet

    def owed(self, homes: QueueHomes) -> dict[str, bytes] | None:
        """The bucket's values when `homes` changed since they were last `written`; else None."""
        return None if homes.version == self._written else bucket_values(homes)

    def written(self, version: int) -> None:
        """The values of `version` are stored (a write that failed is owed again)."""
        self._written = version


def bucket_values(homes: QueueHomes) -> dict[str, bytes]:
    """The `MUSTER_PARTITIONS` entries of every configured LocalQueue: its partition, for
    those who publish a workload's first event. Every replica writes the same values (they
    follow from the configuration alone)."""
    out: dict[str, bytes] = {}
    for key, home in homes.homes.items():
        namespace, _, name = key.partition("/")
        out[bucket.queue_key(namespace, name)] = str(home.partition).encode()
    return out
