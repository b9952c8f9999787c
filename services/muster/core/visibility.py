"""Views of the engine: workloads, queue statuses, quota rows and pending positions, computed
from `EngineState` on demand.

Queue views read the state's `QueueIndex` (counts, usage and pending order kept as records
change), so each costs what its queue holds, not what the engine holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from muster.api.model import Admission, AdmissionCheckState, Condition, Workload, WorkloadKey
from muster.core.admission_fair_sharing import fair_key
from muster.core.conditions import QUOTA_RESERVED
from muster.core.pending_pages import PendingPage
from muster.core.queue_index import Changes, QueueTally
from muster.core.quota import FlavorResource, tree_id
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
    from muster.core.state import EngineState

_NOTHING = QueueTally()  # a queue no workload has named


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


def quota_rows(state: EngineState, name: str) -> list[QuotaRow]:
    cq = state.config.cluster_queues[name]
    node = state.config.tree.cluster_queues[name]
    used = state.index.cluster_queues.get(name, _NOTHING).used
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


def cluster_queue_status(state: EngineState, name: str) -> ClusterQueueStatus:
    cq = state.config.cluster_queues[name]
    tally = state.index.cluster_queues.get(name, _NOTHING)
    node = state.config.tree.cluster_queues[name]
    layout = [
        (f.name, [q.name for q in f.resources]) for g in cq.resource_groups for f in g.flavors
    ]

    def usage_of(totals: Mapping[FlavorResource, int]) -> tuple[FlavorUsage, ...]:
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

    problem = state.config.inactive.get(name)
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
        pending_workloads=tally.pending,
        reserving_workloads=tally.reserving,
        admitted_workloads=tally.admitted,
        flavors_reservation=usage_of(tally.reserved),
        flavors_usage=usage_of(tally.used),
        conditions=(condition,),
    )


def local_queue_status(state: EngineState, namespace: str, name: str) -> LocalQueueStatus:
    key = f"{namespace}/{name}"
    lq = state.config.local_queues[key]
    tally = state.index.local_queues.get(key, _NOTHING)

    def usage_of(usage: Mapping[FlavorResource, int]) -> tuple[FlavorUsage, ...]:
        totals: dict[str, dict[str, int]] = {}
        for (flavor, res), amount in usage.items():
            totals.setdefault(flavor, {})[res] = amount
        return tuple(
            FlavorUsage(
                name=flavor,
                resources=tuple(
                    ResourceUsage(name=res, total=total) for res, total in sorted(per.items())
                ),
            )
            for flavor, per in sorted(totals.items())
        )

    cq_exists = lq.cluster_queue in state.config.cluster_queues
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
        pending_workloads=tally.pending,
        reserving_workloads=tally.reserving,
        admitted_workloads=tally.admitted,
        flavors_reservation=usage_of(tally.reserved),
        flavors_usage=usage_of(tally.used),
        conditions=(condition,),
    )


def fair_usages(state: EngineState, cluster_queue: str) -> dict[str, float] | None:
    """The usage of each LocalQueue with workloads waiting in `cluster_queue`, when it orders
    them by admission fair sharing (else None): what admission's order compares now."""
    runtime = state.queues.get(cluster_queue)
    fair = None if runtime is None else runtime.local_usage
    waiting = state.index.waiting.get(cluster_queue)
    if fair is None or waiting is None:
        return None
    local_queues = {lq for page in waiting.pages for lq in page.local_queues}
    return {lq: fair.usage(lq) for lq in sorted(local_queues)}


def pending_in_order(state: EngineState, cluster_queue: str) -> list[PendingWorkload]:
    """Pending workloads of a ClusterQueue in admission order, with their positions: by
    priority, then FIFO; under admission fair sharing, by their LocalQueue's usage first
    (`fair_key`, as admission takes them)."""
    records: list[WorkloadRecord] = list(state.index.waiting.get(cluster_queue, ()))
    usages = fair_usages(state, cluster_queue)
    if usages is not None:
        ranked = sorted(
            range(len(records)), key=lambda i: fair_key(usages[records[i].local_queue], i)
        )
        records = [records[i] for i in ranked]
    result = []
    in_local: dict[str, int] = {}
    for position, r in enumerate(records):
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


class EngineViews:
    """What callers may ask the engine about its state; reads `state`, never changes it."""

    def __init__(self, state: EngineState) -> None:
        self.state = state

    def workload(self, key: WorkloadKey) -> Workload:
        """The workload as it stands: spec as submitted, status (admission, conditions) current."""
        r = self.state.records[key]
        # Kueue keeps status.admission on a finished workload; eviction clears it.
        admission = self.admission(key)
        conditions = r.conditions
        group = r.group
        if r.is_queued and group is not None and group.shape and group.why is not None:
            # BestEffortFIFO: the members of a parked group wait for the reason its head does,
            # as Kueue would have told each of them after trying it.
            reason, message = group.why
            waiting = Condition(type=QUOTA_RESERVED, status="False", reason=reason, message=message)
            conditions = {**conditions, QUOTA_RESERVED: waiting}
        return msgspec.structs.replace(
            r.wl,
            priority=r.priority,
            admission=admission,
            conditions=tuple(conditions.values()),
            admission_checks=_check_states(r),
            active=r.phase is not Phase.INACTIVE,
        )

    def admission(self, key: WorkloadKey) -> Admission | None:
        """The workload's current (or, once finished, last) admission; cheap."""
        r = self.state.records[key]
        if r.assignment is None or not (r.holds_quota or r.phase is Phase.FINISHED):
            return None
        return Admission(cluster_queue=r.cluster_queue, pod_set_assignments=r.assignment.pod_sets)

    def workloads(self) -> Sequence[Workload]:
        """Every workload the engine knows, in arrival order."""
        return [
            self.workload(k) for k, r in self.state.records.items() if r.phase is not Phase.DELETED
        ]

    def required_checks(self, key: WorkloadKey) -> tuple[str, ...]:
        """Admission checks the workload needs before it is Admitted (after QuotaReserved)."""
        return tuple(sorted(self.state.records[key].checks))

    def holds_quota(self, key: WorkloadKey) -> bool:
        r = self.state.records.get(key)
        return r is not None and r.holds_quota

    def phase(self, key: WorkloadKey) -> str | None:
        """The workload's Phase value ("Pending", "Admitted", "Finished", ...), or None when
        the engine does not know it (never submitted, or forgotten)."""
        r = self.state.records.get(key)
        return None if r is None else r.phase.value

    def cluster_queue_status(self, name: str) -> ClusterQueueStatus:
        return cluster_queue_status(self.state, name)

    def local_queue_status(self, namespace: str, name: str) -> LocalQueueStatus:
        return local_queue_status(self.state, namespace, name)

    def cluster_queue_names(self) -> Sequence[str]:
        return sorted(self.state.config.cluster_queues)

    def local_queue_keys(self) -> Sequence[tuple[str, str]]:
        """(namespace, name) of every LocalQueue, sorted."""
        keys = self.state.config.local_queues
        return sorted(tuple(k.split("/", 1)) for k in keys)  # type: ignore[misc]

    def tree_of_queue(self, namespace: str, queue_name: str) -> str | None:
        """The cohort tree whose quota serves LocalQueue `namespace/queue_name` (the unit
        admission shards on), or None while the LocalQueue or its ClusterQueue is missing."""
        config = self.state.config
        lq = config.local_queues.get(f"{namespace}/{queue_name or 'default'}")
        if lq is None or lq.cluster_queue not in config.tree.cluster_queues:
            return None
        return tree_id(config.tree.cluster_queues[lq.cluster_queue].root())

    def tree_of_cluster_queue(self, name: str) -> str | None:
        """The cohort tree ClusterQueue `name` belongs to ("cohort/<root>" or "cq/<name>"), or
        None when it does not exist."""
        node = self.state.config.tree.cluster_queues.get(name)
        return None if node is None else tree_id(node.root())

    def quota(self, cluster_queue: str) -> Sequence[QuotaRow]:
        """Per flavor and resource of a ClusterQueue: nominal, limits, reserved, used, available."""
        return quota_rows(self.state, cluster_queue)

    def pending_workloads(self, cluster_queue: str) -> Sequence[PendingWorkload]:
        """Pending workloads of a ClusterQueue in admission order, with their positions."""
        return pending_in_order(self.state, cluster_queue)

    def fair_usages(self, cluster_queue: str) -> Mapping[str, float] | None:
        """Per LocalQueue waiting in `cluster_queue`, the usage its admission fair sharing
        order compares now; None when it orders by priority and FIFO alone."""
        return fair_usages(self.state, cluster_queue)

    def pending_pages(self, cluster_queue: str) -> Sequence[PendingPage]:
        """The pages of `pending_workloads` in order, each under an id it keeps while it lives
        (`core.pending_pages`); read them, never change them."""
        waiting = self.state.index.waiting.get(cluster_queue)
        return () if waiting is None else waiting.pages

    def take_view_changes(self) -> Changes:
        """Which queues' views changed since the last call (one caller renders them)."""
        return self.state.index.take_changes()


def _check_states(r: WorkloadRecord) -> tuple[AdmissionCheckState, ...]:
    """Its reservation's checks with their retry counts; without a reservation, the checks
    whose count an eviction kept (Kueue's status keeps them, Pending until a check says
    otherwise: `core.check_retries`)."""
    states = r.checks or {c: r.told_checks.get(c, "Pending") for c in r.retry_counts}
    return tuple(
        AdmissionCheckState(
            name=name,
            state=state,  # type: ignore[arg-type]
            retry_count=r.retry_counts.get(name, 0),
        )
        for name, state in sorted(states.items())
    )
