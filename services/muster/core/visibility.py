"""Queue statuses and pending positions, computed from the engine's records on demand.

Views are not on the decision path, so they read the records instead of keeping counters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec

from muster.core.records import Phase, WorkloadRecord
from muster.core.status import (
    ClusterQueueStatus,
    FlavorUsage,
    LocalQueueStatus,
    PendingWorkload,
    QueueCondition,
    ResourceUsage,
)

if TYPE_CHECKING:
    from muster.core.engine import Engine

_WAITING = (Phase.PENDING, Phase.BACKOFF)


class QuotaRow(msgspec.Struct, frozen=True, kw_only=True):
    """One (flavor, resource) of a ClusterQueue, in MilliUnits."""

    flavor: str
    resource: str
    nominal: int
    borrowing_limit: int | None  # None: unlimited
    lending_limit: int | None
    reserved: int  # by workloads holding quota
    used: int  # by admitted workloads
    borrowed: int  # reserved above nominal
    available: int  # what one more workload could get now, from the cohort too


def quota_rows(engine: Engine, name: str) -> list[QuotaRow]:
    cq = engine.config.cluster_queues[name]
    node = engine.config.tree.cluster_queues[name]
    used: dict[tuple[str, str], int] = {}
    for r in engine.usage.holders.get(name, {}).values():
        if r.phase is Phase.ADMITTED:
            for fr, amount in r.usage.items():
                used[fr] = used.get(fr, 0) + amount
    rows = []
    for group in cq.resource_groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                fr = (flavor.name, quota.name)
                reserved = node.usage.get(fr, 0)
                rows.append(
                    QuotaRow(
                        flavor=flavor.name,
                        resource=quota.name,
                        nominal=quota.nominal_quota,
                        borrowing_limit=quota.borrowing_limit,
                        lending_limit=quota.lending_limit,
                        reserved=reserved,
                        used=used.get(fr, 0),
                        borrowed=max(0, reserved - node.subtree_quota.get(fr, 0)),
                        available=max(0, node.available(fr)),
                    )
                )
    return rows


def cluster_queue_status(engine: Engine, name: str) -> ClusterQueueStatus:
    cq = engine.config.cluster_queues[name]
    records = engine.records_by_queue()[0].get(name, [])
    holders = [r for r in records if r.holds_quota]
    admitted = [r for r in holders if r.phase is Phase.ADMITTED]
    node = engine.config.tree.cluster_queues[name]
    layout = [
        (f.name, [q.name for q in f.resources]) for g in cq.resource_groups for f in g.flavors
    ]

    def usage_of(rs: Iterable[WorkloadRecord]) -> tuple[FlavorUsage, ...]:
        totals: dict[tuple[str, str], int] = {}
        for r in rs:
            for fr, amount in r.usage.items():
                totals[fr] = totals.get(fr, 0) + amount
        return tuple(
            FlavorUsage(
                name=flavor,
                resources=tuple(
                    ResourceUsage(
                        name=res,
                        total=totals.get((flavor, res), 0),
                        borrowed=max(
                            0,
                            totals.get((flavor, res), 0) - node.subtree_quota.get((flavor, res), 0),
                        ),
                    )
                    for res in resources
                ),
            )
            for flavor, resources in layout
        )

    problem = engine.config.inactive.get(name)
    condition = (
        QueueCondition(
            type="Active", status="True", reason="Ready", message="Can admit new workloads"
        )
        if problem is None
        else QueueCondition(
            type="Active",
            status="False",
            reason=problem[0],
            message=f"Can't admit new workloads: {problem[1]}",
        )
    )
    return ClusterQueueStatus(
        name=name,
        pending_workloads=sum(1 for r in records if r.phase in _WAITING),
        reserving_workloads=len(holders),
        admitted_workloads=len(admitted),
        flavors_reservation=usage_of(holders),
        flavors_usage=usage_of(admitted),
        conditions=(condition,),
    )


def local_queue_status(engine: Engine, namespace: str, name: str) -> LocalQueueStatus:
    key = f"{namespace}/{name}"
    lq = engine.config.local_queues[key]
    records = engine.records_by_queue()[1].get(key, [])
    holders = [r for r in records if r.holds_quota]
    admitted = [r for r in holders if r.phase is Phase.ADMITTED]

    def usage_of(rs: Iterable[WorkloadRecord]) -> tuple[FlavorUsage, ...]:
        totals: dict[str, dict[str, int]] = {}
        for r in rs:
            for (flavor, res), amount in r.usage.items():
                per = totals.setdefault(flavor, {})
                per[res] = per.get(res, 0) + amount
        return tuple(
            FlavorUsage(
                name=flavor,
                resources=tuple(
                    ResourceUsage(name=res, total=total) for res, total in sorted(per.items())
                ),
            )
            for flavor, per in sorted(totals.items())
        )

    cq_exists = lq.cluster_queue in engine.config.cluster_queues
    condition = (
        QueueCondition(
            type="Active", status="True", reason="Ready", message="Can submit new workloads"
        )
        if cq_exists
        else QueueCondition(
            type="Active",
            status="False",
            reason="ClusterQueueDoesNotExist",
            message=f"Can't submit new workloads to clusterQueue {lq.cluster_queue}",
        )
    )
    return LocalQueueStatus(
        namespace=namespace,
        name=name,
        cluster_queue=lq.cluster_queue,
        pending_workloads=sum(1 for r in records if r.phase in _WAITING),
        reserving_workloads=len(holders),
        admitted_workloads=len(admitted),
        flavors_reservation=usage_of(holders),
        flavors_usage=usage_of(admitted),
        conditions=(condition,),
    )


def pending_in_order(engine: Engine, cluster_queue: str) -> list[PendingWorkload]:
    """Pending workloads of a ClusterQueue by priority, then FIFO, with their positions."""
    waiting = sorted(
        (r for r in engine.records_by_queue()[0].get(cluster_queue, []) if r.phase in _WAITING),
        key=lambda r: r.order_key,
    )
    in_local: dict[str, int] = {}
    result = []
    for position, r in enumerate(waiting):
        local_position = in_local.get(r.local_queue, 0)
        in_local[r.local_queue] = local_position + 1
        result.append(
            PendingWorkload(
                key=r.key,
                cluster_queue=cluster_queue,
                local_queue=r.local_queue.split("/", 1)[1],
                priority=r.priority,
                position_in_cluster_queue=position,
                position_in_local_queue=local_position,
            )
        )
    return result
