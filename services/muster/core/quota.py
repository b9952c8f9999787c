"""The quota tree: ClusterQueues and Cohorts as nodes, with Kueue's hierarchical accounting.

Every node holds, per (flavor, resource):
- `subtree_quota`: its own nominal quota plus what its children lend to it;
- `guaranteed`: what it keeps for itself (subtree quota minus lending limit, when one is set);
- `usage`: for a ClusterQueue, what its workloads reserve; for a Cohort, the part of each
  child's usage that exceeds the child's guaranteed quota.
Usage changes are propagated up incrementally (O(depth)), never recomputed by scanning.
"""

from __future__ import annotations

from collections.abc import Mapping

from muster.api.model import ResourceGroup

FlavorResource = tuple[str, str]  # (flavor, resource)


class QuotaNode:
    """One ClusterQueue or Cohort in the tree. Mutated only by `QuotaTree` and `Ledger`."""

    __slots__ = (
        "borrowing_limit",
        "children",
        "epoch",
        "guaranteed",
        "height",
        "is_cohort",
        "lendable",
        "lending_limit",
        "name",
        "nominal",
        "parent",
        "subtree_quota",
        "usage",
        "weight",
    )

    def __init__(self, name: str, *, is_cohort: bool) -> None:
        self.name = name
        self.is_cohort = is_cohort
        self.parent: QuotaNode | None = None
        self.children: list[QuotaNode] = []
        self.nominal: dict[FlavorResource, int] = {}
        self.borrowing_limit: dict[FlavorResource, int] = {}  # absent: unlimited
        self.lending_limit: dict[FlavorResource, int] = {}  # absent: lends everything
        self.subtree_quota: dict[FlavorResource, int] = {}
        self.guaranteed: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        self.weight = 1.0
        self.epoch = 0  # roots: bumped whenever who holds what in the tree changes
        self.height = 0  # distance to the furthest leaf below (Kueue's getNodeHeight)
        # Cohorts: what the node could ever lend its children, per resource name (the
        # denominator of their fair shares, Kueue's calculateLendable).
        self.lendable: dict[str, int] = {}

    def set_groups(self, groups: tuple[ResourceGroup, ...]) -> None:
        self.nominal.clear()
        self.borrowing_limit.clear()
        self.lending_limit.clear()
        for group in groups:
            for flavor in group.flavors:
                for quota in flavor.resources:
                    fr = (flavor.name, quota.name)
                    self.nominal[fr] = quota.nominal_quota
                    if quota.borrowing_limit is not None:
                        self.borrowing_limit[fr] = quota.borrowing_limit
                    if quota.lending_limit is not None:
                        self.lending_limit[fr] = quota.lending_limit

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    # --- Kueue's resource-node arithmetic -------------------------------------------------

    def available(self, fr: FlavorResource) -> int:
        """Quota this node can still take for `fr`: its own unused guarantee plus what the
        parent can give, capped by the borrowing limit. May be negative after a quota cut."""
        if self.parent is None:
            return self.subtree_quota.get(fr, 0) - self.usage.get(fr, 0)
        guaranteed = self.guaranteed.get(fr, 0)
        usage = self.usage.get(fr, 0)
        local = max(0, guaranteed - usage)
        from_parent = self.parent.available(fr)
        limit = self.borrowing_limit.get(fr)
        if limit is not None:
            stored_in_parent = self.subtree_quota.get(fr, 0) - guaranteed
            used_in_parent = max(0, usage - guaranteed)
            from_parent = min(stored_in_parent - used_in_parent + limit, from_parent)
        return local + from_parent

    def potential_available(self, fr: FlavorResource) -> int:
        """The most this node could ever take for `fr` if nothing else used any quota."""
        if self.parent is None:
            return self.subtree_quota.get(fr, 0)
        most = self.guaranteed.get(fr, 0) + self.parent.potential_available(fr)
        limit = self.borrowing_limit.get(fr)
        if limit is not None:
            most = min(most, self.subtree_quota.get(fr, 0) + limit)
        return most

    def local_available(self, fr: FlavorResource) -> int:
        """Guaranteed quota (kept from the parent by a lending limit) that usage leaves free."""
        return max(0, self.guaranteed.get(fr, 0) - self.usage.get(fr, 0))

    def borrows_with(self, fr: FlavorResource, amount: int) -> bool:
        """True if taking `amount` more of `fr` puts this node above its subtree quota."""
        return self.usage.get(fr, 0) + amount > self.subtree_quota.get(fr, 0)

    def is_borrowing(self, fr: FlavorResource) -> bool:
        return self.usage.get(fr, 0) > self.subtree_quota.get(fr, 0)

    def add_usage(self, fr: FlavorResource, delta: int) -> None:
        """Change this node's usage and carry the change of its excess up the tree."""
        node: QuotaNode | None = self
        while node is not None and delta != 0:
            guaranteed = node.guaranteed.get(fr, 0)
            before = node.usage.get(fr, 0)
            after = before + delta
            node.usage[fr] = after
            delta = max(0, after - guaranteed) - max(0, before - guaranteed)
            node = node.parent


class QuotaTree:
    """All nodes, indexed by name; rebuilt on configuration change, updated on usage change."""

    def __init__(self) -> None:
        self.cluster_queues: dict[str, QuotaNode] = {}
        self.cohorts: dict[str, QuotaNode] = {}

    def cohort(self, name: str) -> QuotaNode:
        node = self.cohorts.get(name)
        if node is None:
            node = self.cohorts[name] = QuotaNode(name, is_cohort=True)
        return node

    def link(self, child: QuotaNode, parent_name: str | None) -> None:
        if child.parent is not None:
            child.parent.children.remove(child)
            child.parent = None
        if parent_name is not None:
            parent = self.cohort(parent_name)
            child.parent = parent
            parent.children.append(child)

    def recompute(self, cq_usage: Mapping[str, Mapping[FlavorResource, int]]) -> None:
        """Recompute subtree quotas, guarantees and usage from the leaves' usage."""
        for root in self._roots():
            self._compute_quota(root)
            self._compute_usage(root, cq_usage)
        for node in self.cohorts.values():
            node.lendable = {}
            for fr in node.root().subtree_quota:
                lent = node.lendable.get(fr[1], 0) + node.potential_available(fr)
                node.lendable[fr[1]] = lent

    def _roots(self) -> list[QuotaNode]:
        nodes = [*self.cohorts.values(), *self.cluster_queues.values()]
        return sorted((n for n in nodes if n.parent is None), key=lambda n: n.name)

    def _compute_quota(self, node: QuotaNode) -> None:
        node.subtree_quota = dict(node.nominal)
        node.height = min(len(node.children), 1)
        for child in node.children:
            self._compute_quota(child)
            if child.is_cohort:
                node.height = max(node.height, child.height + 1)
            for fr, quota in child.subtree_quota.items():
                lent = quota - child.guaranteed.get(fr, 0)
                node.subtree_quota[fr] = node.subtree_quota.get(fr, 0) + lent
        node.guaranteed = {
            fr: max(0, node.subtree_quota.get(fr, 0) - limit)
            for fr, limit in node.lending_limit.items()
        }

    def _compute_usage(
        self, node: QuotaNode, cq_usage: Mapping[str, Mapping[FlavorResource, int]]
    ) -> None:
        if not node.is_cohort:
            node.usage = dict(cq_usage.get(node.name, {}))
            return
        node.usage = {}
        for child in node.children:
            self._compute_usage(child, cq_usage)
            for fr, used in child.usage.items():
                excess = max(0, used - child.guaranteed.get(fr, 0))
                node.usage[fr] = node.usage.get(fr, 0) + excess


def borrowing_level(cq: QuotaNode, fr: FlavorResource, amount: int) -> tuple[int, bool]:
    """How high in the cohort tree `amount` more of `fr` must come from, and whether that
    subtree is smaller than the whole tree (Kueue's FindHeightOfLowestSubtreeThatFits).

    0 when the ClusterQueue's own quota suffices; otherwise the height of the lowest ancestor
    whose subtree quota covers it (the root's height when none does). The second value tells
    whether quota could be reclaimed from within that smaller subtree.
    """
    if cq.parent is None:
        return 0, False
    used = cq.usage.get(fr, 0)
    if used + amount <= cq.subtree_quota.get(fr, 0):
        return 0, True
    remaining = amount - max(0, cq.guaranteed.get(fr, 0) - used)
    node: QuotaNode | None = cq.parent
    while node is not None:
        used = node.usage.get(fr, 0)
        if used + remaining <= node.subtree_quota.get(fr, 0):
            return node.height, node.parent is not None
        remaining -= max(0, node.guaranteed.get(fr, 0) - used)
        node = node.parent
    return cq.root().height, False


def tree_id(root: QuotaNode) -> str:
    """A name for the tree under `root` that cannot clash between a Cohort and a ClusterQueue."""
    return f"{'cohort' if root.is_cohort else 'cq'}/{root.name}"
