"""Preemption's candidate order under admission fair sharing, as Kueue's CandidatesOrdering
(pkg/scheduler/preemption/common/ordering.go): two candidates are compared by their
LocalQueues' usage, the busier first, only when both are of one usage-based ClusterQueue.

The scenarios (tests/scenarios/afs/preemption-*, reclaim-*) drive the common cases; these pin
which candidates a list's usage may order: the preemptor's own always, other ClusterQueues'
when they are all of one or when the search takes them queue by queue (fair sharing).
"""

from __future__ import annotations

import msgspec

from muster.api.model import WorkloadKey
from muster.core.preemption_search import TreeView, sort_candidates
from muster.core.quota import FlavorResource

USAGE = {("mine", "ns/busy"): 5.0, ("mine", "ns/idle"): 1.0}
USAGE |= {("x", "ns/busy"): 5.0, ("x", "ns/idle"): 1.0, ("y", "ns/busy"): 5.0}


class Holder(msgspec.Struct, frozen=True, kw_only=True):
    key: WorkloadKey
    cluster_queue: str
    local_queue: str
    priority: int = 0
    queue_ts: float = 0.0
    reserved_at_s: float = 0.0
    usage: dict[FlavorResource, int] = {}
    evicted: bool = False
    seq: int = 0


def holder(name: str, cq: str, lq: str, *, priority: int) -> Holder:
    return Holder(
        key=WorkloadKey(name), cluster_queue=cq, local_queue=f"ns/{lq}", priority=priority
    )


def tree(*, fair: bool = False) -> TreeView:
    return TreeView(
        nodes={},
        holders=lambda cq: (),
        fair_sharing=("LessThanOrEqualToFinalShare",) if fair else None,  # type: ignore[arg-type]
        borrowers=(),
        queue_usage=lambda cq, lq: USAGE.get((cq, lq)) if cq != "plain" else None,
    )


def names(found: list[Holder]) -> list[str]:
    return [c.key for c in found]


def test_the_busier_local_queue_first_in_the_preemptors_cluster_queue() -> None:
    found = [holder("low", "mine", "idle", priority=0), holder("high", "mine", "busy", priority=5)]
    sort_candidates(found, "mine", tree())  # type: ignore[arg-type]
    assert names(found) == ["high", "low"]


def test_priority_alone_where_the_cluster_queue_does_not_order_by_usage() -> None:
    found = [
        holder("high", "plain", "busy", priority=5),
        holder("low", "plain", "idle", priority=0),
    ]
    sort_candidates(found, "plain", tree())  # type: ignore[arg-type]
    assert names(found) == ["low", "high"]


def test_other_cluster_queues_candidates_by_usage_when_all_of_one() -> None:
    found = [
        holder("low", "x", "idle", priority=0),
        holder("high", "x", "busy", priority=5),
        holder("own", "mine", "idle", priority=0),
    ]
    sort_candidates(found, "mine", tree())  # type: ignore[arg-type]
    assert names(found) == ["high", "low", "own"]


def test_other_cluster_queues_candidates_by_priority_when_of_several() -> None:
    # Kueue: usage within x, priority between x and y: no order; muster takes priority
    found = [
        holder("x-low", "x", "idle", priority=0),
        holder("x-high", "x", "busy", priority=5),
        holder("y-mid", "y", "busy", priority=3),
    ]
    sort_candidates(found, "mine", tree())  # type: ignore[arg-type]
    assert names(found) == ["x-low", "y-mid", "x-high"]


def test_fair_sharing_orders_each_cluster_queues_candidates_by_usage() -> None:
    found = [
        holder("x-low", "x", "idle", priority=0),
        holder("x-high", "x", "busy", priority=5),
        holder("y-mid", "y", "busy", priority=3),
    ]
    sort_candidates(found, "mine", tree(fair=True))  # type: ignore[arg-type]
    assert [c.key for c in found if c.cluster_queue == "x"] == ["x-high", "x-low"]
