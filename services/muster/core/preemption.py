"""Preemption: which admitted workloads to evict so that a pending one fits.

Kueue's rules: candidates within the ClusterQueue (`withinClusterQueue`), reclaimed from
borrowing ClusterQueues of the cohort (`reclaimWithinCohort`), or taken while borrowing
(`borrowWithinCohort` below a priority threshold); candidates are ordered (other queues
first, lower priority first, most recently admitted first), removed one by one until the
workload fits, then every victim whose return would still let it fit is spared (fill-back).
With fair sharing, victims come from the queues with the highest share, found by walking the
cohort tree from the root (at each level the child with the highest share), while the
configured strategies (LessThanOrEqualToFinalShare, LessThanInitialShare) allow it, comparing
the shares of the two children of the lowest common cohort (Kueue's `fairsharing` package).
Workloads already being evicted stay candidates, ordered first: a preemptor that is tried again
while its victims stop picks them again instead of evicting more.

The search removes candidates' usage from the quota tree tentatively and always restores it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

import msgspec

from muster.api.model import (
    FairSharingStrategy,
    Preemption,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from muster.core.fairshare import Share, dominant_share, with_usage
from muster.core.quota import FlavorResource, QuotaNode, QuotaTree


class QuotaHolder(Protocol):
    """An admitted (quota-reserving) workload as preemption sees it."""

    @property
    def key(self) -> WorkloadKey: ...
    @property
    def cluster_queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def queue_ts(self) -> float: ...
    @property
    def reserved_at_s(self) -> float: ...
    @property
    def usage(self) -> Mapping[FlavorResource, int]: ...
    @property
    def evicted(self) -> bool: ...
    @property
    def seq(self) -> int: ...


class PreemptionRequest(msgspec.Struct, frozen=True, kw_only=True):
    cluster_queue: str
    priority: int
    queue_ts: float
    seq: int
    policy: Preemption
    usage: Mapping[FlavorResource, int]  # the assignment's total usage
    short: frozenset[FlavorResource]  # resources that need preemption


class TreeView(msgspec.Struct, frozen=True, kw_only=True):
    """The cohort tree the request lives in: nodes and who holds quota where."""

    nodes: Mapping[str, QuotaNode]  # ClusterQueue name -> node, every CQ of the tree
    holders: Callable[[str], Iterable[QuotaHolder]]  # ClusterQueue name -> its quota holders
    fair_sharing: tuple[FairSharingStrategy, ...] | None  # None: fair sharing off
    # ClusterQueues of the tree over their subtree quota of something (a superset of those
    # borrowing what is needed): the only ones to reclaim from
    borrowers: Collection[str]


class Victims(msgspec.Struct, frozen=True, kw_only=True):
    targets: tuple[WorkloadKey, ...]
    reasons: Mapping[WorkloadKey, str]  # Kueue's preemption reason per victim


class Preemptor(Protocol):
    """The preempting workload, as its victims' message names it."""

    @property
    def wl(self) -> Workload: ...
    @property
    def cluster_queue(self) -> str: ...


Strategy = Callable[[Share, Share, Share], bool]  # (preemptor new, target old, target new)
_STRATEGIES: dict[FairSharingStrategy, Strategy] = {
    FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE: lambda new_p, _old_t, new_t: (
        new_p <= new_t
    ),
    FairSharingStrategy.LESS_THAN_INITIAL_SHARE: lambda new_p, old_t, _new_t: new_p < old_t,
}
_NEGATIVE = Share(False, -1.0)  # below every share: where a search for the highest starts


def pick_victims(req: PreemptionRequest, tree: TreeView) -> Victims | None:
    """The smallest set of workloads to evict so `req` fits, or None if no set will do."""
    cq = tree.nodes[req.cluster_queue]
    under_nominal = _under_nominal(cq, req.short)
    threshold = _borrow_threshold(req)
    # Other queues' workloads only ever help a queue under nominal, one allowed to borrow
    # while preempting, or fair sharing; skipping them otherwise changes no outcome.
    cohort_helps = under_nominal or threshold is not None or tree.fair_sharing is not None
    candidates = _find_candidates(req, tree, include_cohort=cohort_helps)
    if not candidates:
        return None
    if tree.fair_sharing is not None:
        return _fair(req, tree, candidates)
    same_queue = [c for c in candidates if c.cluster_queue == req.cluster_queue]
    if len(same_queue) == len(candidates):
        return _minimal(req, tree, candidates, allow_borrowing=True, below=None)
    if threshold is not None:
        if not under_nominal:
            candidates = [
                c
                for c in candidates
                if c.cluster_queue == req.cluster_queue or c.priority < threshold
            ]
        return _minimal(req, tree, candidates, allow_borrowing=True, below=threshold)
    found = _minimal(req, tree, candidates, allow_borrowing=False, below=None)
    if found is not None:
        return found
    return _minimal(req, tree, same_queue, allow_borrowing=True, below=None)


def _find_candidates(
    req: PreemptionRequest, tree: TreeView, *, include_cohort: bool
) -> list[QuotaHolder]:
    """Kueue's findCandidates, in Kueue's candidate order."""
    policy = req.policy
    found: list[QuotaHolder] = []
    if policy.within_cluster_queue != WithinClusterQueue.NEVER:
        newer_equal = (
            policy.within_cluster_queue == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY
        )
        for c in tree.holders(req.cluster_queue):
            if c.priority > req.priority or not _uses(c, req.short):
                continue
            if c.priority == req.priority and not (newer_equal and _newer(c, req)):
                continue
            found.append(c)
    if include_cohort and policy.reclaim_within_cohort != ReclaimWithinCohort.NEVER:
        only_lower = policy.reclaim_within_cohort != ReclaimWithinCohort.ANY
        for name in sorted(tree.borrowers):
            node = tree.nodes[name]
            if name == req.cluster_queue or not any(node.is_borrowing(fr) for fr in req.short):
                continue
            for c in tree.holders(name):
                if only_lower and c.priority >= req.priority:
                    continue
                if _uses(c, req.short):
                    found.append(c)
    found.sort(key=lambda c: _candidate_order(c, req.cluster_queue))
    return found


def _candidate_order(c: QuotaHolder, cq: str) -> tuple[bool, bool, int, float, int]:
    # Already evicted first, other queues first, lower priority first, newest reservation first.
    return (not c.evicted, c.cluster_queue == cq, c.priority, -c.reserved_at_s, -c.seq)


def _newer(c: QuotaHolder, req: PreemptionRequest) -> bool:
    return (c.queue_ts, c.seq) > (req.queue_ts, req.seq)


def _uses(c: QuotaHolder, frs: frozenset[FlavorResource]) -> bool:
    return any(fr in c.usage for fr in frs)


def _under_nominal(cq: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    return all(cq.usage.get(fr, 0) < cq.nominal.get(fr, 0) for fr in frs)


def _borrow_threshold(req: PreemptionRequest) -> int | None:
    """Priority at or above which a victim in another queue forbids borrowing (Kueue)."""
    bwc = req.policy.borrow_within_cohort
    if bwc.policy == "Never":
        return None
    threshold = req.priority
    if bwc.max_priority_threshold is not None and bwc.max_priority_threshold < threshold:
        threshold = bwc.max_priority_threshold + 1
    return threshold


def _fits(req: PreemptionRequest, cq: QuotaNode, *, allow_borrowing: bool) -> bool:
    for fr, val in req.usage.items():
        if val > cq.available(fr):
            return False
        if not allow_borrowing and cq.borrows_with(fr, val):
            return False
    return True


def _remove(tree: TreeView, c: QuotaHolder) -> None:
    node = tree.nodes[c.cluster_queue]
    for fr, amount in c.usage.items():
        node.add_usage(fr, -amount)


def _restore(tree: TreeView, c: QuotaHolder) -> None:
    node = tree.nodes[c.cluster_queue]
    for fr, amount in c.usage.items():
        node.add_usage(fr, amount)


def _reason(c: QuotaHolder, req: PreemptionRequest, tree: TreeView) -> str:
    if c.cluster_queue == req.cluster_queue:
        return "InClusterQueue"
    # Called while the victims are out of the tree: does the preemptor still borrow then?
    cq = tree.nodes[req.cluster_queue]
    if any(cq.borrows_with(fr, val) for fr, val in req.usage.items()):
        return "InCohortReclaimWhileBorrowing"
    return "InCohortReclamation"


def _minimal(
    req: PreemptionRequest,
    tree: TreeView,
    candidates: Sequence[QuotaHolder],
    *,
    allow_borrowing: bool,
    below: int | None,
) -> Victims | None:
    """Kueue's minimalPreemptions: remove in order until it fits, then fill back."""
    cq = tree.nodes[req.cluster_queue]
    removed: list[QuotaHolder] = []
    fits = False
    try:
        for c in candidates:
            other = c.cluster_queue != req.cluster_queue
            if other and not any(tree.nodes[c.cluster_queue].is_borrowing(fr) for fr in req.short):
                continue
            if other and below is not None and c.priority >= below:
                allow_borrowing = False
            _remove(tree, c)
            removed.append(c)
            if _fits(req, cq, allow_borrowing=allow_borrowing):
                fits = True
                break
        if not fits:
            return None
        victims = _fill_back(req, tree, removed, allow_borrowing=allow_borrowing)
        return Victims(
            targets=tuple(v.key for v in victims),
            reasons={v.key: _reason(v, req, tree) for v in victims},
        )
    finally:
        for c in removed:
            _restore(tree, c)


def _fill_back(
    req: PreemptionRequest, tree: TreeView, removed: list[QuotaHolder], *, allow_borrowing: bool
) -> list[QuotaHolder]:
    """Give back, newest removal first (the last one is needed), every victim it can spare.

    Leaves exactly the victims removed from the tree; the caller restores `removed`.
    """
    cq = tree.nodes[req.cluster_queue]
    victims = list(removed)
    for i in range(len(removed) - 2, -1, -1):
        c = removed[i]
        _restore(tree, c)
        if _fits(req, cq, allow_borrowing=allow_borrowing):
            victims.remove(c)
            removed.pop(i)  # spared: already back in the tree
        else:
            _remove(tree, c)
    return victims


def _fair(
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
            fits, retry = _first_strategy(req, tree, candidates, strategies[0], removed, reasons)
            if not fits and len(strategies) > 1:
                fits = _second_strategy(req, tree, retry, removed, reasons)
        finally:
            with_usage(cq, req.usage, -1)
        if not fits:
            return None
        victims = _fill_back(req, tree, removed, allow_borrowing=True)
        return Victims(
            targets=tuple(v.key for v in victims), reasons={v.key: reasons[v.key] for v in victims}
        )
    finally:
        for c in removed:
            _restore(tree, c)


def _fits_fair(req: PreemptionRequest, tree: TreeView) -> bool:
    """Does the incoming workload fit, its own (simulated) usage taken out first?"""
    cq = tree.nodes[req.cluster_queue]
    with_usage(cq, req.usage, -1)
    try:
        return _fits(req, cq, allow_borrowing=True)
    finally:
        with_usage(cq, req.usage, 1)


def _take(
    tree: TreeView,
    c: QuotaHolder,
    reason: str,
    removed: list[QuotaHolder],
    reasons: dict[WorkloadKey, str],
) -> None:
    _remove(tree, c)
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
                    ahead = _candidate_order(self.by_queue[child.name][0], self.preemptor.name)
                    now = _candidate_order(self.by_queue[best_cq.name][0], self.preemptor.name)
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


_PREEMPTION_CAUSE = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
    "InCohortFairSharing": "Fair Sharing within the cohort",
}
_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def preemption_message(
    preemptor: Preemptor, victim: QuotaHolder, reason: str, tree: QuotaTree
) -> str:
    """Kueue's message on a victim's Preempted and Evicted conditions (preemption.go)."""
    meta = preemptor.wl.meta
    job_uid = meta.labels.get(_JOB_UID_LABEL) or next(
        (o.uid for o in meta.owner_references if o.kind == "Job" and o.uid), "UNKNOWN"
    )
    return (
        f"Preempted to accommodate a workload (UID: {meta.uid or 'UNKNOWN'}, JobUID: "
        f"{job_uid}) due to {_PREEMPTION_CAUSE[reason]}; preemptor path: "
        f"{_cq_path(tree, preemptor.cluster_queue)}; preemptee path: "
        f"{_cq_path(tree, victim.cluster_queue)}"
    )


def _cq_path(tree: QuotaTree, cluster_queue: str) -> str:
    """ "/<root cohort>/.../<cluster queue>", as Kueue's buildCQPath writes it."""
    names: list[str] = []
    node = tree.cluster_queues.get(cluster_queue)
    while node is not None:
        names.append(node.name)
        node = node.parent
    return "/" + "/".join(reversed(names or [cluster_queue]))
