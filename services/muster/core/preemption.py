"""Preemption: which admitted workloads to evict so that a pending one fits.

Kueue's rules: candidates within the ClusterQueue (`withinClusterQueue`), reclaimed from
borrowing ClusterQueues of the cohort (`reclaimWithinCohort`), or taken while borrowing
(`borrowWithinCohort` below a priority threshold); candidates are ordered (other queues
first, under admission fair sharing the busier LocalQueue first, lower priority first, most
recently admitted first: `preemption_search.candidate_keys`), removed one by one until the
workload fits, then every victim whose return would still let it fit is spared (fill-back).
With fair sharing, victims come from the queues with the highest share (`preemption_fair`); in
trees of nested Cohorts, Kueue's hierarchical candidate generator (`preemption_hierarchy`).
Workloads already being evicted stay candidates, ordered first: a preemptor that is tried again
while its victims stop picks them again instead of evicting more.

The search removes candidates' usage from the quota tree tentatively and always restores it.
"""

from __future__ import annotations

from collections.abc import Sequence

from muster.api.model import ReclaimWithinCohort, WithinClusterQueue
from muster.core.preemption_fair import fair_victims
from muster.core.preemption_hierarchy import hierarchical_victims, is_nested
from muster.core.preemption_search import (
    PreemptionRequest,
    QuotaHolder,
    TreeView,
    Victims,
    fill_back,
    fits,
    remove,
    restore,
    satisfies,
    sort_candidates,
    under_nominal,
    uses,
)

# The request, tree and victims are defined with the search; callers take them from here.
__all__ = ["PreemptionRequest", "QuotaHolder", "TreeView", "Victims", "pick_victims"]


def pick_victims(req: PreemptionRequest, tree: TreeView) -> Victims | None:
    """The smallest set of workloads to evict so `req` fits, or None if no set will do."""
    cq = tree.nodes[req.cluster_queue]
    if tree.fair_sharing is None and is_nested(cq):
        return hierarchical_victims(req, tree)
    # In a flat cohort Kueue's hierarchical generator gives every other queue's candidate the
    # same advantage (or none), which is the search below; it keeps its index of borrowers.
    under_nominal_now = under_nominal(cq, req.short)
    threshold = _borrow_threshold(req)
    # Other queues' workloads only ever help a queue under nominal, one allowed to borrow
    # while preempting, or fair sharing; skipping them otherwise changes no outcome.
    cohort_helps = under_nominal_now or threshold is not None or tree.fair_sharing is not None
    candidates = _find_candidates(req, tree, include_cohort=cohort_helps)
    if not candidates:
        return None
    if tree.fair_sharing is not None:
        return fair_victims(req, tree, candidates)
    same_queue = [c for c in candidates if c.cluster_queue == req.cluster_queue]
    if len(same_queue) == len(candidates):
        return _minimal(req, tree, candidates, allow_borrowing=True, below=None)
    if threshold is not None:
        if not under_nominal_now:
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
        within = policy.within_cluster_queue
        found.extend(
            c
            for c in tree.holders(req.cluster_queue)
            if uses(c, req.short) and satisfies(within, c, req)
        )
    if include_cohort and policy.reclaim_within_cohort != ReclaimWithinCohort.NEVER:
        for name in sorted(tree.borrowers):
            node = tree.nodes[name]
            if name == req.cluster_queue or not any(node.is_borrowing(fr) for fr in req.short):
                continue
            reclaim = policy.reclaim_within_cohort
            found.extend(
                c for c in tree.holders(name) if uses(c, req.short) and satisfies(reclaim, c, req)
            )
    sort_candidates(found, req.cluster_queue, tree)
    return found


def _borrow_threshold(req: PreemptionRequest) -> int | None:
    """Priority at or above which a victim in another queue forbids borrowing (Kueue)."""
    bwc = req.policy.borrow_within_cohort
    if bwc.policy == "Never":
        return None
    threshold = req.priority
    if bwc.max_priority_threshold is not None and bwc.max_priority_threshold < threshold:
        threshold = bwc.max_priority_threshold + 1
    return threshold


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
    fitted = False
    try:
        for c in candidates:
            other = c.cluster_queue != req.cluster_queue
            if other and not any(tree.nodes[c.cluster_queue].is_borrowing(fr) for fr in req.short):
                continue
            if other and below is not None and c.priority >= below:
                allow_borrowing = False
            remove(tree, c)
            removed.append(c)
            if fits(req, cq, allow_borrowing=allow_borrowing):
                fitted = True
                break
        if not fitted:
            return None
        victims = fill_back(req, tree, removed, allow_borrowing=allow_borrowing)
        return Victims(
            targets=tuple(v.key for v in victims),
            reasons={v.key: _reason(v, req, tree) for v in victims},
        )
    finally:
        for c in removed:
            restore(tree, c)
