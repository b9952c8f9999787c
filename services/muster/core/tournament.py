"""Fair sharing's order over one cohort tree: a tournament per cohort, winners climbing.

Kueue's fairSharingIterator (`fair_sharing_iterator.go` runTournament): each Cohort picks, among
its children (Cohorts and ClusterQueues), the one whose share inside it would be lowest with its
nominee admitted (not borrowing on what the nominee asks for first, then the share, then
priority, then FIFO); a ClusterQueue nominates its head, a Cohort the winner of its own
tournament, and the root's winner is tried next.

Kept incrementally: each Cohort has a heap of its children keyed by a lower bound of their key
(a child whose nominee may have changed is listed again with the weakest key), and a winner is
found by re-keying the top until its key is exact. A decision therefore costs O(depth) heap
operations and share computations, whatever else waits in the tree.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from muster.api.model import WorkloadKey
from muster.core.attempt import Attempts
from muster.core.config import Configuration
from muster.core.fairshare import Share, borrows_on, dominant_share, with_usage
from muster.core.quota import QuotaNode
from muster.core.usage import Usage

if TYPE_CHECKING:
    from muster.core.queues import QueueRuntime
    from muster.core.records import WorkloadRecord

Key = tuple[object, ...]
WEAKEST: Key = ()  # sorts before every key: a child whose key must be computed again
# (the nominee, the node whose share is compared) -> the nominee's key in that node's parent
KeyOf = Callable[["WorkloadRecord", QuotaNode], Key]


class Tournament:
    """The fair-sharing order of one cohort tree whose root is a Cohort."""

    __slots__ = ("heaps", "key_of", "listed", "tokens", "weak")

    def __init__(self, key_of: KeyOf, listed: Callable[[], None] = lambda: None) -> None:
        self.key_of = key_of
        # Called on every push: a round walks the tree again only after one (ListedTrees).
        self.listed = listed
        # cohort name -> heap of (key lower bound, token, child name, child)
        self.heaps: dict[str, list[tuple[Key, int, str, QueueRuntime | QuotaNode]]] = {}
        self.tokens: dict[str, int] = {}  # child name -> its one valid entry's token
        # Children whose valid entry has the weakest key: nothing above them has been looked
        # at since (their key sorts first), so a child found here ends a `touch`.
        self.weak: set[str] = set()

    def touch(self, cq: QueueRuntime) -> None:
        """`cq`'s nominee, or the shares on its path, may have changed: list it and every
        Cohort above it again, with the weakest key."""
        child: QueueRuntime | QuotaNode = cq
        name = f"cq/{cq.name}"
        parent = cq.node.parent
        while parent is not None and name not in self.weak:
            self._push(parent.name, name, child, WEAKEST)
            self.weak.add(name)
            child, name, parent = parent, f"cohort/{parent.name}", parent.parent

    def winner(self, root: QuotaNode) -> tuple[QueueRuntime, WorkloadRecord] | None:
        """The next ClusterQueue to try and its head, or None when nothing waits."""
        return self._winner(root)

    def _winner(self, cohort: QuotaNode) -> tuple[QueueRuntime, WorkloadRecord] | None:
        heap = self.heaps.get(cohort.name)
        while heap:
            key, token, name, child = heap[0]
            if self.tokens.get(name) != token:
                heapq.heappop(heap)
                continue
            self.weak.discard(name)
            found = self._nominee(child)
            if found is None:
                heapq.heappop(heap)
                self.tokens[name] = token + 1  # listed again when it has a nominee
                continue
            node = child if isinstance(child, QuotaNode) else child.node
            exact = self.key_of(found[1], node)
            if exact > key:
                self.tokens[name] = token + 1
                heapq.heapreplace(heap, (exact, token + 1, name, child))
                continue
            return found
        return None

    def _nominee(
        self, child: QueueRuntime | QuotaNode
    ) -> tuple[QueueRuntime, WorkloadRecord] | None:
        if isinstance(child, QuotaNode):
            return self._winner(child)
        group = child.best_group()
        head = group.head() if group is not None else None
        return None if head is None else (child, head)

    def _push(self, parent: str, name: str, child: QueueRuntime | QuotaNode, key: Key) -> None:
        token = self.tokens.get(name, 0) + 1
        self.tokens[name] = token
        heapq.heappush(self.heaps.setdefault(parent, []), (key, token, name, child))
        self.listed()


class FairKeys:
    """Heads' keys in the tournament (Kueue's entryComparer), cached per head while holders
    in its tree stay as they are."""

    def __init__(self, config: Configuration, usage: Usage, attempts: Attempts) -> None:
        self.config = config
        self.usage = usage
        self.attempts = attempts
        self._levels: dict[WorkloadKey, tuple[tuple[int, int], dict[str, tuple[bool, Share]]]] = {}

    def key(self, r: WorkloadRecord, node: QuotaNode) -> Key:
        """Head `r`'s key in the tournament of `node`'s parent (`node` is its ClusterQueue or
        a Cohort above it): not borrowing there on what `r` asks for first, then the share of
        `node` with `r` admitted, then priority, then FIFO."""
        stamp = self.usage.stamp(r.cluster_queue)
        cached = self._levels.get(r.key)
        if cached is None or cached[0] != stamp:
            cached = self._levels[r.key] = (stamp, self._levels_of(r))
        flag, share = cached[1][node.name if node.is_cohort else ""]
        return (flag, share, -r.priority, r.queue_ts, r.seq)

    def forget(self, key: WorkloadKey) -> None:
        self._levels.pop(key, None)

    def _levels_of(self, r: WorkloadRecord) -> dict[str, tuple[bool, Share]]:
        """(borrowing on what `r` asks for, share) of `r`'s ClusterQueue ("") and each Cohort
        above it but the root, with `r` admitted."""
        a = self.attempts.attempt(r).assignment
        asks = [fr for fr, amount in a.usage.items() if amount > 0]
        cq = self.config.tree.cluster_queues[r.cluster_queue]
        with_usage(cq, a.usage, 1)
        try:
            found = {"": (borrows_on(cq, asks), dominant_share(cq))}
            node = cq.parent
            while node is not None and node.parent is not None:
                found[node.name] = (borrows_on(node, asks), dominant_share(node))
                node = node.parent
        finally:
            with_usage(cq, a.usage, -1)
        return found
