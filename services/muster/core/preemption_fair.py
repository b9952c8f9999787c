"""Fair-sharing preemption (Kueue's `fairsharing` package): victims come from the ClusterQueues
with the highest share, found by walking the cohort tree from the root (at each level the child
with the highest share), while the configured strategies (LessThanOrEqualToFinalShare,
LessThanInitialShare) allow it, comparing the shares of the two children of the lowest common
cohort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from muster.api.model import FairSharingStrategy, WorkloadKey
from muster.core.fairshare import Share, dominant_share, with_usage
from muster.core.preemption_search import (
    PreemptionRequest,
    QuotaHolder,
    TreeView,
    Victims,
    candidate_order,
    fill_back,
    fits,
    remove,
    restore,
)
from muster.core.quota import QuotaNode

Strategy = Callable[[Share, Share, Share], bool]  # (preemptor new, target old, target new)
_STRATEGIES: dict[FairSharingStrategy, Strategy] = {
    FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE: lambda new_p, _old_t, new_t: (
        new_p <= new_t
    ),
    FairSharingStrategy.LESS_THAN_INITIAL_SHARE: lambda new_p, old_t, _new_t: new_p < old_t,
}
_NEGATIVE = Share(False, -1.0)  # below every share: where a search for the highest starts


def fair_victims(
    req: PreemptionRequest, tree: TreeView, candidates: Sequence[QuotaHolder]
) -> Victims | None:
    """Kueue's fairPreemptions: rule S2-a (the first strategy), then S2-b (the second) over
    the candidates S2-a passed by, then fill-back. Shares include the incoming workload."""
    strategies = [_STRATEGIES[s] for s in tree.fair_sharing or ()]
    cq = tree.nodes[req.cluster_queue]
    removed: list[QuotaHolder] = []
    reasons: dict[WorkloadKey, str] = {}
    try:
        with_usage(cq, req.usage, 1)
        try:
            fitted, retry = _first_strategy(req, tree, candidates, strategies[0], removed, reasons)
            if not fitted and len(strategies) > 1:
                fitted = _second_strategy(req, tree, retry, removed, reasons)
        finally:
            with_usage(cq, req.usage, -1)
        if not fitted:
            return None
        victims = fill_back(req, tree, removed, allow_borrowing=True)
        return Victims(
            targets=tuple(v.key for v in victims), reasons={v.key: reasons[v.key] for v in victims}
        )
    finally:
        for c in removed:
            restore(tree, c)


def _fits_fair(req: PreemptionRequest, tree: TreeView) -> bool:
    """Does the incoming workload fit, its own (simulated) usage taken out first?"""
    cq = tree.nodes[req.cluster_queue]
    with_usage(cq, req.usage, -1)
    try:
        return fits(req, cq, allow_borrowing=True)
    finally:
        with_usage(cq, req.usage, 1)


def _take(
    tree: TreeView,
    c: QuotaHolder,
    reason: str,
    removed: list[QuotaHolder],
    reasons: dict[WorkloadKey, str],
) -> None:
    remove(tree, c)
    removed.append(c)
    reasons[c.key] = reason


def _first_strategy(
    req: PreemptionRequest,
    tree: TreeView,
    candidates: Sequence[QuotaHolder],
    strategy: Strategy,
    removed: list[QuotaHolder],
    reasons: dict[WorkloadKey, str],
) -> tuple[bool, list[QuotaHolder]]:
    """Rule S2-a; returns whether it fits and the candidates it passed by (for S2-b)."""
    ordering = _TargetOrdering(req, tree, candidates)
    retry: list[QuotaHolder] = []
    # Kueue's FairSharingPreemptWithinNominal: a preemptor within its nominal quota for the
    # contested resources reclaims whatever the shares say.
    cq = tree.nodes[req.cluster_queue]
    within_nominal = not any(cq.is_borrowing(fr) for fr in req.short)
    for target in ordering.targets():
        if target == req.cluster_queue:
            _take(tree, ordering.pop(target), "InClusterQueue", removed, reasons)
            if _fits_fair(req, tree):
                return True, retry
            continue
        if within_nominal:
            _take(tree, ordering.pop(target), "InCohortReclamation", removed, reasons)
            if _fits_fair(req, tree):
                return True, retry
            continue
        preemptor_new, target_old = ordering.shares(target)
        while ordering.has(target):
            c = ordering.pop(target)
            if strategy(preemptor_new, target_old, ordering.share_without(target, c)):
                _take(tree, c, "InCohortFairSharing", removed, reasons)
                if _fits_fair(req, tree):
                    return True, retry
                break  # the shares changed: choose the target again
            retry.append(c)
    return False, retry


def _second_strategy(
    req: PreemptionRequest,
    tree: TreeView,
    retry: Sequence[QuotaHolder],
    removed: list[QuotaHolder],
    reasons: dict[WorkloadKey, str],
) -> bool:
    """Rule S2-b (LessThanInitialShare): at most one more victim per ClusterQueue."""
    ordering = _TargetOrdering(req, tree, retry)
    for target in ordering.targets():
        preemptor_new, target_old = ordering.shares(target)
        c = ordering.pop(target)
        if preemptor_new < target_old:
            _take(tree, c, "InCohortFairSharing", removed, reasons)
            if _fits_fair(req, tree):
                return True
        ordering.drop(target)
    return False


class _TargetOrdering:
    """Kueue's TargetClusterQueueOrdering: which ClusterQueue to take the next victim from.

    From the root, descend into the child (Cohort or ClusterQueue) with the highest share,
    pruning children that do not borrow (and are not on the preemptor's path) or have no
    candidate left. Shares of the preemptor and a target are those of the two children of
    their lowest common Cohort (the "almost LCAs").
    """

    def __init__(
        self, req: PreemptionRequest, tree: TreeView, candidates: Iterable[QuotaHolder]
    ) -> None:
        self.tree = tree
        self.preemptor = tree.nodes[req.cluster_queue]
        self.path = _path(self.preemptor)
        self.by_queue: dict[str, list[QuotaHolder]] = {}
        for c in candidates:
            self.by_queue.setdefault(c.cluster_queue, []).append(c)
        self.pruned_queues: set[str] = set()
        self.pruned_cohorts: set[str] = set()

    def has(self, cq: str) -> bool:
        return bool(self.by_queue.get(cq))

    def pop(self, cq: str) -> QuotaHolder:
        return self.by_queue[cq].pop(0)

    def drop(self, cq: str) -> None:
        self.pruned_queues.add(cq)

    def targets(self) -> Iterator[str]:
        preemptor = self.preemptor
        if preemptor.parent is None:
            while preemptor.name not in self.pruned_queues and self.has(preemptor.name):
                yield preemptor.name
            return
        root = preemptor.root()
        while root.name not in self.pruned_cohorts:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: QuotaNode) -> str | None:
        best_cq: QuotaNode | None = None
        best_cq_share = _NEGATIVE
        best_cohort: QuotaNode | None = None
        best_cohort_share = _NEGATIVE
        for child in sorted(cohort.children, key=lambda n: (n.is_cohort, n.name)):
            share = dominant_share(child)
            borrowing = _borrowing(child)
            if not child.is_cohort:
                if child.name in self.pruned_queues:
                    continue
                if (not borrowing and child is not self.preemptor) or not self.has(child.name):
                    self.pruned_queues.add(child.name)
                elif share == best_cq_share and best_cq is not None:
                    ahead = candidate_order(self.by_queue[child.name][0], self.preemptor.name)
                    now = candidate_order(self.by_queue[best_cq.name][0], self.preemptor.name)
                    if ahead < now:
                        best_cq = child
                elif share > best_cq_share:
                    best_cq, best_cq_share = child, share
            elif child.name not in self.pruned_cohorts:
                if not borrowing and child.name not in self.path:
                    self.pruned_cohorts.add(child.name)
                elif share >= best_cohort_share:
                    best_cohort, best_cohort_share = child, share
        if best_cohort is None and best_cq is None:
            self.pruned_cohorts.add(cohort.name)
            return None
        if best_cohort is not None and best_cohort_share >= best_cq_share:
            return self._next(best_cohort)
        assert best_cq is not None
        return best_cq.name

    def shares(self, target: str) -> tuple[Share, Share]:
        """(the preemptor's share, the target's share), each at its almost-LCA."""
        mine, theirs = self._almost_lcas(target)
        return dominant_share(mine), dominant_share(theirs)

    def share_without(self, target: str, c: QuotaHolder) -> Share:
        """The target's share at its almost-LCA once `c` is gone."""
        node = self.tree.nodes[target]
        with_usage(node, c.usage, -1)
        try:
            return dominant_share(self._almost_lcas(target)[1])
        finally:
            with_usage(node, c.usage, 1)

    def _almost_lcas(self, target: str) -> tuple[QuotaNode, QuotaNode]:
        node = self.tree.nodes[target]
        theirs = node
        while theirs.parent is not None and theirs.parent.name not in self.path:
            theirs = theirs.parent
        lca = theirs.parent
        mine = self.preemptor
        while mine.parent is not lca and mine.parent is not None:
            mine = mine.parent
        return mine, theirs


def _path(cq: QuotaNode) -> set[str]:
    """Names of the Cohorts above `cq`."""
    found: set[str] = set()
    node = cq.parent
    while node is not None:
        found.add(node.name)
        node = node.parent
    return found


def _borrowing(node: QuotaNode) -> bool:
    """Kueue's DRS.IsBorrowing: over its subtree quota for some flavor and resource."""
    usage = node.usage
    return any(usage.get(fr, 0) > quota for fr, quota in node.subtree_quota.items())
