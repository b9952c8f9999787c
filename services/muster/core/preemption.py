"""Preemption: which admitted workloads to evict so that a pending one fits.

Kueue's rules: candidates within the ClusterQueue (`withinClusterQueue`), reclaimed from
borrowing ClusterQueues of the cohort (`reclaimWithinCohort`), or taken while borrowing
(`borrowWithinCohort` below a priority threshold); candidates are ordered (other queues
first, lower priority first, most recently admitted first), removed one by one until the
workload fits, then every victim whose return would still let it fit is spared (fill-back).
With fair sharing, victims come from the queues with the highest share while the
configured strategies (LessThanOrEqualToFinalShare, LessThanInitialShare) allow it.

The search removes candidates' usage from the quota tree tentatively and always restores it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import msgspec

from muster.api.model import (
    FairSharingStrategy,
    Preemption,
    ReclaimWithinCohort,
    WithinClusterQueue,
    WorkloadKey,
)
from muster.core.fairshare import dominant_share
from muster.core.quota import FlavorResource, QuotaNode


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
    lendable: Mapping[str, int]


class Victims(msgspec.Struct, frozen=True, kw_only=True):
    targets: tuple[WorkloadKey, ...]
    reasons: Mapping[WorkloadKey, str]  # Kueue's preemption reason per victim


Strategy = Callable[[float, float, float], bool]
_STRATEGIES: dict[FairSharingStrategy, Strategy] = {
    FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE: lambda new_p, _old_t, new_t: (
        new_p <= new_t
    ),
    FairSharingStrategy.LESS_THAN_INITIAL_SHARE: lambda new_p, old_t, _new_t: new_p < old_t,
}


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
    same_queue = [c for c in candidates if c.cluster_queue == req.cluster_queue]
    if len(same_queue) == len(candidates):
        return _minimal(req, tree, candidates, allow_borrowing=True, below=None)
    if tree.fair_sharing is not None:
        return _fair(req, tree, candidates, below=threshold)
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
        for name in sorted(tree.nodes):
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
    if tree.fair_sharing is not None:
        return "InCohortFairSharing"
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


class _QueueCandidates:
    __slots__ = ("name", "share", "workloads")

    def __init__(self, name: str, share: float, workloads: list[QuotaHolder]) -> None:
        self.name = name
        self.share = share
        self.workloads = workloads


def _fair(
    req: PreemptionRequest, tree: TreeView, candidates: Sequence[QuotaHolder], *, below: int | None
) -> Victims | None:
    """Kueue's fairPreemptions: take from the highest-share queue while a strategy allows."""
    strategies = [_STRATEGIES[s] for s in tree.fair_sharing or ()]
    cq = tree.nodes[req.cluster_queue]
    removed: list[QuotaHolder] = []
    retry: list[QuotaHolder] = []
    fits = False
    try:
        new_share = dominant_share(cq, tree.lendable, plus=req.usage)
        heap = _share_heap(candidates, tree)
        while heap and not fits:
            _, _, entry = heapq.heappop(heap)
            if entry.name == req.cluster_queue:
                c = entry.workloads.pop(0)
                _remove(tree, c)
                removed.append(c)
                fits = _fits(req, cq, allow_borrowing=True)
                new_share = dominant_share(cq, tree.lendable, plus=req.usage)
                if entry.workloads:
                    heapq.heappush(heap, (-entry.share, entry.name, entry))
                continue
            node = tree.nodes[entry.name]
            for i, c in enumerate(entry.workloads):
                below_threshold = below is not None and c.priority < below
                target_new = dominant_share(node, tree.lendable, minus=c.usage)
                if below_threshold or strategies[0](new_share, entry.share, target_new):
                    _remove(tree, c)
                    removed.append(c)
                    fits = _fits(req, cq, allow_borrowing=True)
                    rest = entry.workloads[i + 1 :]
                    if rest and any(node.is_borrowing(fr) for fr in req.short):
                        entry.workloads, entry.share = rest, target_new
                        heapq.heappush(heap, (-entry.share, entry.name, entry))
                    break
                retry.append(c)
        if not fits and len(strategies) > 1:
            heap = _share_heap(retry, tree)
            while heap and not fits:
                _, _, entry = heapq.heappop(heap)
                if strategies[1](new_share, entry.share, 0.0):
                    c = entry.workloads[0]
                    _remove(tree, c)
                    removed.append(c)
                    fits = _fits(req, cq, allow_borrowing=True)
        if not fits:
            return None
        victims = _fill_back(req, tree, removed, allow_borrowing=True)
        return Victims(
            targets=tuple(v.key for v in victims),
            reasons={v.key: _reason(v, req, tree) for v in victims},
        )
    finally:
        for c in removed:
            _restore(tree, c)


def _share_heap(
    candidates: Iterable[QuotaHolder], tree: TreeView
) -> list[tuple[float, str, _QueueCandidates]]:
    by_queue: dict[str, list[QuotaHolder]] = {}
    for c in candidates:
        by_queue.setdefault(c.cluster_queue, []).append(c)
    heap = [
        (-share, name, _QueueCandidates(name, share, workloads))
        for name, workloads in by_queue.items()
        for share in [dominant_share(tree.nodes[name], tree.lendable)]
    ]
    heapq.heapify(heap)
    return heap
