"""Preemption's search space: the request, the cohort tree it is searched in, the victims found,
and the tentative moves both searches (classic and fair sharing) make on the quota tree.

A candidate's usage is removed from the tree while the search tries it and always restored;
`fill_back` gives back every victim whose return still lets the preemptor fit (Kueue).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

import msgspec

from muster.api.model import FairSharingStrategy, Preemption, WorkloadKey
from muster.core.quota import FlavorResource, QuotaNode


class QuotaHolder(Protocol):
    """An admitted (quota-reserving) workload as preemption sees it."""

    @property
    def key(self) -> WorkloadKey: ...
    @property
    def cluster_queue(self) -> str: ...
    @property
    def local_queue(self) -> str: ...
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
    # (ClusterQueue, LocalQueue) -> the LocalQueue's admission fair sharing usage now, None when
    # the ClusterQueue does not order by usage (Kueue's LocalQueueFSUsage, set in its snapshot
    # only for usage-based ClusterQueues)
    queue_usage: Callable[[str, str], float | None] = lambda cq, lq: None


class Victims(msgspec.Struct, frozen=True, kw_only=True):
    targets: tuple[WorkloadKey, ...]
    reasons: Mapping[WorkloadKey, str]  # Kueue's preemption reason per victim


CandidateKey = tuple[bool, bool, float, int, float, int]


def candidate_order(c: QuotaHolder, cq: str, usage: float | None = None) -> CandidateKey:
    """Kueue's CandidatesOrdering: already evicted first, other ClusterQueues first, then (under
    admission fair sharing, `usage` of `c`'s LocalQueue) the LocalQueue with the higher usage
    first, lower priority first, newest reservation first."""
    fair = -usage if usage is not None else 0.0
    return (not c.evicted, c.cluster_queue == cq, fair, c.priority, -c.reserved_at_s, -c.seq)


def sort_candidates(found: list[QuotaHolder], cq: str, tree: TreeView) -> None:
    """Sort `found` in Kueue's candidate order for a preemptor of `cq`."""
    found.sort(key=candidate_keys(found, cq, tree, each_queue=tree.fair_sharing is not None))


def candidate_keys(
    found: Iterable[QuotaHolder], cq: str, tree: TreeView, *, each_queue: bool = False
) -> Callable[[QuotaHolder], CandidateKey]:
    """The `candidate_order` of each of `found`, sorted together for a preemptor of `cq`.

    Kueue compares two candidates by their LocalQueues' usage only when both are of one
    ClusterQueue that orders by usage (ordering.go, resourceUsagePreemptionEnabled): always so
    among the preemptor's own; among other ClusterQueues' candidates when they are all of one,
    or when the search takes them queue by queue (`each_queue`: fair sharing, which compares
    the heads of two queues without usage). Differs from Kueue: with candidates of several
    other ClusterQueues in one list Kueue's comparison is no order (usage inside one, priority
    across), and its sort's outcome depends on the input's; muster leaves their usage out
    and orders them by priority."""
    others = {c.cluster_queue for c in found if c.cluster_queue != cq}
    ranked = {cq} | others if each_queue or len(others) == 1 else {cq}
    usages: dict[tuple[str, str], float | None] = {}

    def key(c: QuotaHolder) -> CandidateKey:
        usage = None
        if c.cluster_queue in ranked:
            at = (c.cluster_queue, c.local_queue)
            if at not in usages:
                usages[at] = tree.queue_usage(*at)
            usage = usages[at]
        return candidate_order(c, cq, usage)

    return key


def satisfies(policy: str, c: QuotaHolder, req: PreemptionRequest) -> bool:
    """Kueue's SatisfiesPreemptionPolicy: may `req` preempt `c` under `policy`?"""
    if c.priority < req.priority:
        return policy != "Never"
    if policy == "Any":
        return True
    newer = (c.queue_ts, c.seq) > (req.queue_ts, req.seq)
    return policy == "LowerOrNewerEqualPriority" and c.priority == req.priority and newer


def uses(c: QuotaHolder, frs: frozenset[FlavorResource]) -> bool:
    return any(fr in c.usage for fr in frs)


def under_nominal(cq: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    """Usage strictly below the ClusterQueue's nominal quota in every resource of `frs`."""
    return all(cq.usage.get(fr, 0) < cq.nominal.get(fr, 0) for fr in frs)


def fits(req: PreemptionRequest, cq: QuotaNode, *, allow_borrowing: bool) -> bool:
    for fr, val in req.usage.items():
        if val > cq.available(fr):
            return False
        if not allow_borrowing and cq.borrows_with(fr, val):
            return False
    return True


def remove(tree: TreeView, c: QuotaHolder) -> None:
    node = tree.nodes[c.cluster_queue]
    for fr, amount in c.usage.items():
        node.add_usage(fr, -amount)


def restore(tree: TreeView, c: QuotaHolder) -> None:
    node = tree.nodes[c.cluster_queue]
    for fr, amount in c.usage.items():
        node.add_usage(fr, amount)


def fill_back(
    req: PreemptionRequest, tree: TreeView, removed: list[QuotaHolder], *, allow_borrowing: bool
) -> list[QuotaHolder]:
    """Give back, newest removal first (the last one is needed), every victim it can spare.

    Leaves exactly the victims removed from the tree; the caller restores `removed`.
    """
    cq = tree.nodes[req.cluster_queue]
    victims = list(removed)
    for i in range(len(removed) - 2, -1, -1):
        c = removed[i]
        restore(tree, c)
        if fits(req, cq, allow_borrowing=allow_borrowing):
            victims.remove(c)
            removed.pop(i)  # spared: already back in the tree
        else:
            remove(tree, c)
    return victims
