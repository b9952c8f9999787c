"""Classical preemption in nested Cohorts: Kueue's hierarchical candidate generator.

Read from Kueue's pkg/scheduler/preemption (preemption.go, classical/candidate_generator.go,
classical/hierarchical_preemption.go) at commit ff69552e79 of the v0.20 development line.

The preemptor's ClusterQueue climbs its tree one ancestor at a time. At each level the
subtrees it has not visited yet are searched for ClusterQueues over their quota, skipping any
Cohort within its own. Once some level's subtree quota covers the request, the preemptor has
a *hierarchical advantage* over the workloads found there and above: it is nearer to the quota
they use, so it reclaims it whatever their priority (within `reclaimWithinCohort`). Below that
level, candidates are taken by priority, and `borrowWithinCohort` decides whether taking one
still lets the preemptor borrow. Candidates are tried advantaged first, then by priority, then
the preemptor's own queue (those already being evicted before all), each removed while its
queue (and every Cohort up to the common ancestor) is still over quota, until the preemptor
fits; fill-back then spares every victim it can.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import Enum, auto
from typing import NamedTuple

from muster.api.model import BorrowWithinCohortPolicy, ReclaimWithinCohort, WithinClusterQueue
from muster.core.preemption_search import (
    PreemptionRequest,
    QuotaHolder,
    TreeView,
    Victims,
    candidate_keys,
    fill_back,
    fits,
    remove,
    restore,
    satisfies,
    under_nominal,
    uses,
)
from muster.core.quota import FlavorResource, QuotaNode


class Variant(Enum):
    """How a candidate may be preempted (Kueue's preemptionVariant)."""

    WITHIN_CQ = auto()
    HIERARCHICAL_RECLAIM = auto()  # the preemptor is nearer to the quota it uses
    RECLAIM_WITHOUT_BORROWING = auto()  # only if the preemptor then stops borrowing
    RECLAIM_WHILE_BORROWING = auto()  # below borrowWithinCohort's priority threshold


_REASON = {
    Variant.WITHIN_CQ: "InClusterQueue",
    Variant.HIERARCHICAL_RECLAIM: "InCohortReclamation",
    Variant.RECLAIM_WITHOUT_BORROWING: "InCohortReclamation",
    Variant.RECLAIM_WHILE_BORROWING: "InCohortReclaimWhileBorrowing",
}


class Candidate(NamedTuple):
    holder: QuotaHolder
    lca: QuotaNode | None  # the Cohort shared with the preemptor's queue; None for its own
    variant: Variant


def is_nested(cq: QuotaNode) -> bool:
    """Whether the ClusterQueue's tree has a ClusterQueue below a Cohort below another."""
    return cq.parent is not None and cq.root().height >= 2


def hierarchical_victims(req: PreemptionRequest, tree: TreeView) -> Victims | None:
    """Kueue's classicalPreemptions over its hierarchical candidate generator."""
    cq = tree.nodes[req.cluster_queue]
    own = _own_queue(req, tree)
    advantaged, by_priority = _other_queues(req, tree, cq)
    # Kueue sorts each list alone and puts every already evicted candidate ahead of the rest.
    lists = (advantaged, by_priority, own)
    keys = [candidate_keys((c.holder for c in found), cq.name, tree) for found in lists]
    ordered = sorted(
        ((rank, c) for rank, found in enumerate(lists) for c in found),
        key=lambda rc: (not rc[1].holder.evicted, rc[0], keys[rc[0]](rc[1].holder)),
    )
    candidates = [c for _, c in ordered]
    for allow_borrowing in _tries(
        req, cq, others=bool(advantaged or by_priority), ahead=bool(advantaged)
    ):
        found = _search(req, tree, candidates, allow_borrowing=allow_borrowing)
        if found is not None:
            return found
    return None


def _tries(req: PreemptionRequest, cq: QuotaNode, *, others: bool, ahead: bool) -> tuple[bool, ...]:
    """Whether to search allowing the preemptor to borrow, in Kueue's order of tries."""
    forbidden = req.policy.borrow_within_cohort.policy == BorrowWithinCohortPolicy.NEVER
    if not others or (forbidden and not under_nominal(cq, req.short)):
        return (True,)
    if forbidden and not ahead:
        return (False, True)
    return (True, False)


def _own_queue(req: PreemptionRequest, tree: TreeView) -> list[Candidate]:
    if req.policy.within_cluster_queue == WithinClusterQueue.NEVER:
        return []
    return list(_from_queue(req, tree, req.cluster_queue, None, advantaged=False))


def _other_queues(
    req: PreemptionRequest, tree: TreeView, cq: QuotaNode
) -> tuple[list[Candidate], list[Candidate]]:
    """Candidates outside the preemptor's queue: (with hierarchical advantage, by priority)."""
    advantaged: list[Candidate] = []
    by_priority: list[Candidate] = []
    if cq.parent is None or req.policy.reclaim_within_cohort == ReclaimWithinCohort.NEVER:
        return advantaged, by_priority
    ahead, remaining = _fits_in_subtree(cq, req.usage)
    visited: QuotaNode | None = None
    subtree: QuotaNode | None = cq.parent
    while subtree is not None:
        found = advantaged if ahead else by_priority
        found.extend(_in_subtree(req, tree, subtree, subtree, visited, advantaged=ahead))
        covered, remaining = _fits_in_subtree(subtree, remaining)
        # Every workload met from the first level whose quota covers the request on uses the
        # quota of a subtree the preemptor belongs to: the advantage holds for them all.
        ahead = ahead or covered
        visited, subtree = subtree, subtree.parent
    return advantaged, by_priority


def _in_subtree(
    req: PreemptionRequest,
    tree: TreeView,
    node: QuotaNode,
    lca: QuotaNode,
    visited: QuotaNode | None,
    *,
    advantaged: bool,
) -> Iterator[Candidate]:
    """Candidates under `node` in ClusterQueues over quota, skipping Cohorts within their own
    quota and the subtree the climb came from."""
    for child in node.children:
        if child is visited or _within_quota(child, req.short):
            continue
        if child.is_cohort:
            yield from _in_subtree(req, tree, child, lca, visited, advantaged=advantaged)
        elif child.name != req.cluster_queue:
            yield from _from_queue(req, tree, child.name, lca, advantaged=advantaged)


def _from_queue(
    req: PreemptionRequest, tree: TreeView, name: str, lca: QuotaNode | None, *, advantaged: bool
) -> Iterator[Candidate]:
    for c in tree.holders(name):
        variant = _variant(req, c, advantaged=advantaged)
        if variant is not None:
            yield Candidate(c, lca, variant)


def _variant(req: PreemptionRequest, c: QuotaHolder, *, advantaged: bool) -> Variant | None:
    """Kueue's classifyPreemptionVariant; None when `c` may not be preempted."""
    own = c.cluster_queue == req.cluster_queue
    policy = req.policy.within_cluster_queue if own else req.policy.reclaim_within_cohort
    if not uses(c, req.short) or not satisfies(policy, c, req):
        return None
    if own:
        return Variant.WITHIN_CQ
    if advantaged:
        return Variant.HIERARCHICAL_RECLAIM
    bwc = req.policy.borrow_within_cohort
    if bwc.policy == BorrowWithinCohortPolicy.NEVER or c.priority >= req.priority:
        return Variant.RECLAIM_WITHOUT_BORROWING
    threshold = bwc.max_priority_threshold
    if threshold is not None and c.priority > threshold:
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING


def _search(
    req: PreemptionRequest, tree: TreeView, candidates: list[Candidate], *, allow_borrowing: bool
) -> Victims | None:
    """Remove valid candidates in order until the preemptor fits, then fill back."""
    cq = tree.nodes[req.cluster_queue]
    removed: list[QuotaHolder] = []
    variants: dict[int, Variant] = {}
    try:
        for c in candidates:
            if not _still_valid(req, tree, c, allow_borrowing=allow_borrowing):
                continue
            remove(tree, c.holder)
            removed.append(c.holder)
            variants[id(c.holder)] = c.variant
            if fits(req, cq, allow_borrowing=allow_borrowing):
                victims = fill_back(req, tree, removed, allow_borrowing=allow_borrowing)
                return Victims(
                    targets=tuple(v.key for v in victims),
                    reasons={v.key: _REASON[variants[id(v)]] for v in victims},
                )
        return None
    finally:
        for holder in removed:
            restore(tree, holder)


def _still_valid(
    req: PreemptionRequest, tree: TreeView, c: Candidate, *, allow_borrowing: bool
) -> bool:
    """Kueue's candidateIsValid: earlier removals may have brought its queue, or a Cohort
    between it and the common ancestor, back within quota."""
    if c.holder.cluster_queue == req.cluster_queue:
        return True
    if allow_borrowing and c.variant is Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    node: QuotaNode | None = tree.nodes[c.holder.cluster_queue]
    while node is not None and node is not c.lca:
        if _within_quota(node, req.short):
            return False
        node = node.parent
    return True


def _within_quota(node: QuotaNode, frs: frozenset[FlavorResource]) -> bool:
    """Kueue's IsWithinNominalInResources: usage within the subtree quota for all of `frs`."""
    return not any(node.is_borrowing(fr) for fr in frs)


def _fits_in_subtree(
    node: QuotaNode, requests: Mapping[FlavorResource, int]
) -> tuple[bool, dict[FlavorResource, int]]:
    """Kueue's QuantitiesFitInQuota: whether `requests` fit in `node`'s subtree quota, and what
    remains of them for its parent once the node's unlent quota is used."""
    covered = not any(node.borrows_with(fr, val) for fr, val in requests.items())
    remaining = {fr: max(0, val - node.local_available(fr)) for fr, val in requests.items()}
    return covered, remaining
