"""Who holds quota where: the holders of each ClusterQueue and the usage they add up to.

`Configuration` holds the objects and the quota tree's shape; `Usage` writes what holders
reserve into that tree's nodes, and answers the questions preemption and the fair-sharing
order ask about it (who borrows, whether anything changed since a cached decision).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from muster.api.model import WorkloadKey
from muster.core.config import Configuration
from muster.core.quota import FlavorResource, QuotaNode

if TYPE_CHECKING:
    from muster.core.records import WorkloadRecord


class Usage:
    """The holders of every ClusterQueue, kept in step with the usage of the quota tree."""

    def __init__(self, config: Configuration) -> None:
        self.config = config
        self.holders: dict[str, dict[WorkloadKey, WorkloadRecord]] = {}
        # ClusterQueue name -> the ClusterQueues of its tree using more than their subtree quota
        # of something (one set per tree): the only ones preemption may reclaim from
        self._borrowers: dict[str, set[str]] = {}

    def rebuild(self, holders: list[WorkloadRecord]) -> None:
        """Carry the usage of `holders` into the tree `config.build` just made."""
        config = self.config
        self.holders = {name: {} for name in config.cluster_queues}
        usage: dict[str, dict[FlavorResource, int]] = {}
        for r in holders:
            self.holders.setdefault(r.cluster_queue, {})[r.key] = r
            cq_usage = usage.setdefault(r.cluster_queue, {})
            for fr, amount in r.usage.items():
                cq_usage[fr] = cq_usage.get(fr, 0) + amount
        config.tree.recompute(usage)
        self._borrowers = {}
        per_tree: dict[int, set[str]] = {}
        for name, node in config.tree.cluster_queues.items():
            borrowers = self._borrowers[name] = per_tree.setdefault(id(config.root_of(name)), set())
            if _over_quota(node):
                borrowers.add(name)

    def hold(self, r: WorkloadRecord) -> None:
        self.holders.setdefault(r.cluster_queue, {})[r.key] = r
        node = self.config.tree.cluster_queues.get(r.cluster_queue)
        if node is not None:
            self.config.root_of(node.name).epoch += 1
            for fr, amount in r.usage.items():
                node.add_usage(fr, amount)
            self._note_borrowing(node)

    def unhold(self, r: WorkloadRecord) -> Mapping[FlavorResource, int]:
        held = self.holders.get(r.cluster_queue, {})
        if held.pop(r.key, None) is None:
            return {}
        node = self.config.tree.cluster_queues.get(r.cluster_queue)
        if node is not None:
            self.config.root_of(node.name).epoch += 1
            for fr, amount in r.usage.items():
                node.add_usage(fr, -amount)
            self._note_borrowing(node)
        return r.usage

    def touch(self, cq: str) -> None:
        """Who holds what in `cq`'s tree changed without usage changing (an eviction)."""
        root = self.config.roots.get(cq)
        if root is not None:
            root.epoch += 1

    def stamp(self, cq: str) -> tuple[int, int]:
        """Changes whenever who holds what in `cq`'s cohort tree does (or trees are rebuilt)."""
        return self.config.epoch, self.config.root_of(cq).epoch

    def borrowers_in(self, cq: str) -> Collection[str]:
        """ClusterQueues of `cq`'s tree using more than their subtree quota of something (a
        live view: read it before changing usage)."""
        return self._borrowers[cq]

    def _note_borrowing(self, node: QuotaNode) -> None:
        if _over_quota(node):
            self._borrowers[node.name].add(node.name)
        else:
            self._borrowers[node.name].discard(node.name)


def _over_quota(node: QuotaNode) -> bool:
    usage = node.usage
    return any(usage.get(fr, 0) > quota for fr, quota in node.subtree_quota.items())
