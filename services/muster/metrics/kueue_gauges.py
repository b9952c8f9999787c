"""Kueue's gauges from the admission engine's state: a pure function of the engine.

`queue_gauges(engine, owns_tree=...)` gives every gauge of `kueue_series` for the cohort trees
a replica owns (`kueue_series.Gauges`), so that summing over admission replicas is right:

- per ClusterQueue: pending workloads (`active`: queued to be tried; `inadmissible`: in a group
  that waits for quota to be released, backing off, or in an inactive ClusterQueue, as Kueue
  counts them), reserving and admitted ones, status, its place in the cohort tree, and per
  flavor and resource its nominal quota, limits (+Inf when unset), reservation and usage;
- per LocalQueue: the same counts, its Active condition and its reservation and usage;
- per cohort: its place in the tree, its subtree's quota and reservations (summed over every
  ClusterQueue below it) and admitted workloads;
- `multikueue_cluster_status` from `workers` (ClusterQueue → worker cluster → active), which
  the caller knows from MultiKueue dispatch.

Read from the engine's queue index (`core.queue_index`) and quota tree, off the decision path
(like the visibility views, and as often): a pass costs the queues and their pending groups,
never the records (a walk over every record took seconds at a million pending). No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from muster.core.engine import Engine
from muster.core.queue_index import QueueTally
from muster.core.queues import Park, PendingGroup
from muster.core.quota import FlavorResource, QuotaNode, tree_id
from muster.metrics.kueue_series import Gauges, quantity, unlimited_or

ACTIVE, INADMISSIBLE = "active", "inadmissible"
CQ_STATUSES = ("pending", "active", "terminating")  # Kueue's values; muster never terminates
CONDITION_STATUSES = ("True", "False", "Unknown")

Values = dict[tuple[str, ...], float]
_NOTHING: Final = QueueTally()  # a queue no workload has named


def queue_gauges(
    engine: Engine,
    *,
    owns_tree: Callable[[str], bool],
    owns_local_queue: Callable[[str, str], bool] = lambda _ns, _name: True,
    workers: Mapping[str, Mapping[str, bool]] | None = None,
) -> Gauges:
    """Every Kueue gauge of the cohort trees `owns_tree` accepts (a LocalQueue without a
    ClusterQueue: if `owns_local_queue`)."""
    out: dict[str, Values] = {}
    owned = set()
    for name in engine.cluster_queue_names():
        node = engine.config.tree.cluster_queues.get(name)
        if node is not None and owns_tree(tree_id(node.root())):
            owned.add(name)
            _cluster_queue(out, engine, name, node)
    for namespace, name in engine.local_queue_keys():
        lq = engine.config.local_queues[f"{namespace}/{name}"]
        exists = lq.cluster_queue in engine.config.cluster_queues
        if lq.cluster_queue in owned or (not exists and owns_local_queue(namespace, name)):
            _local_queue(out, engine, namespace, name, exists=exists)
    for cohort in engine.config.tree.cohorts.values():
        if owns_tree(tree_id(cohort.root())):
            _cohort(out, engine, cohort)
    for cq, clusters in (workers or {}).items():
        if cq in owned:
            for cluster, active in clusters.items():
                for state in ("True", "False"):
                    value = float(state == ("True" if active else "False"))
                    _put(out, "multikueue_cluster_status", (cq, cluster, state), value)
    return out


def _put(out: dict[str, Values], series: str, labels: tuple[str, ...], value: float) -> None:
    out.setdefault(series, {})[labels] = value


def _counts(
    tally: QueueTally, groups: Mapping[PendingGroup, int], *, active_queue: bool
) -> dict[str, int]:
    """A queue's counts from its index tally; the Pending records of parked groups (and every
    Pending one of an inactive queue) are inadmissible, as Backoff ones are."""
    pending = tally.pending - tally.backoff
    parked = sum(n for group, n in groups.items() if group.park is Park.PARKED)
    active = pending - parked if active_queue else 0
    return {
        ACTIVE: active,
        INADMISSIBLE: tally.pending - active,
        "reserving": tally.reserving,
        "admitted": tally.admitted,
    }


def _names(node: QuotaNode) -> tuple[str, str]:
    """(parent cohort, root cohort) of `node`, "" where there is none."""
    parent = node.parent.name if node.parent is not None else ""
    root = node.root()
    return parent, (root.name if root is not node or node.is_cohort else "")


def _cluster_queue(out: dict[str, Values], engine: Engine, name: str, node: QuotaNode) -> None:
    active = name not in engine.config.inactive
    index = engine.state.index
    tally = index.cluster_queues.get(name, _NOTHING)
    counts = _counts(tally, index.cluster_queue_groups.get(name, {}), active_queue=active)
    for status in (ACTIVE, INADMISSIBLE):
        _put(out, "kueue_pending_workloads", (name, status), counts[status])
    _put(out, "kueue_reserving_active_workloads", (name,), counts["reserving"])
    _put(out, "kueue_admitted_active_workloads", (name,), counts["admitted"])
    for status in CQ_STATUSES:
        _put(out, "kueue_cluster_queue_status", (name, status), float(status == _status(active)))
    parent, root = _names(node)
    _put(out, "kueue_cluster_queue_info", (name, parent, root), 1.0)
    for row in engine.quota(name):
        labels = (parent, name, row.flavor, row.resource)
        _put(out, "kueue_cluster_queue_nominal_quota", labels, quantity(row.nominal))
        _put(out, "kueue_cluster_queue_borrowing_limit", labels, unlimited_or(row.borrowing_limit))
        _put(out, "kueue_cluster_queue_lending_limit", labels, unlimited_or(row.lending_limit))
        _put(out, "kueue_cluster_queue_resource_reservation", labels, quantity(row.reserved))
        _put(out, "kueue_cluster_queue_resource_usage", labels, quantity(row.used))


def _status(active: bool) -> str:
    return "active" if active else "pending"


def _local_queue(
    out: dict[str, Values], engine: Engine, namespace: str, name: str, *, exists: bool
) -> None:
    lq, key = (name, namespace), f"{namespace}/{name}"
    cq = engine.config.local_queues[key].cluster_queue
    index = engine.state.index
    counts = _counts(
        index.local_queues.get(key, _NOTHING),
        index.local_queue_groups.get(key, {}),
        active_queue=exists and cq not in engine.config.inactive,
    )
    for status in (ACTIVE, INADMISSIBLE):
        _put(out, "kueue_local_queue_pending_workloads", (*lq, status), counts[status])
    _put(out, "kueue_local_queue_reserving_active_workloads", lq, counts["reserving"])
    _put(out, "kueue_local_queue_admitted_active_workloads", lq, counts["admitted"])
    condition = "True" if exists else "False"
    for value in CONDITION_STATUSES:
        _put(out, "kueue_local_queue_status", (*lq, value), float(value == condition))
    view = engine.local_queue_status(namespace, name)
    for series, usage in (
        ("kueue_local_queue_resource_reservation", view.flavors_reservation),
        ("kueue_local_queue_resource_usage", view.flavors_usage),
    ):
        for flavor in usage:
            for r in flavor.resources:
                _put(out, series, (*lq, flavor.name, r.name), quantity(r.total))


def _cohort(out: dict[str, Values], engine: Engine, cohort: QuotaNode) -> None:
    parent, root = _names(cohort)
    _put(out, "kueue_cohort_info", (cohort.name, parent, root), 1.0)
    members = list(_cluster_queues_below(cohort))
    reserved: dict[FlavorResource, int] = {}
    for member in members:
        for fr, amount in member.usage.items():
            reserved[fr] = reserved.get(fr, 0) + amount
    # As Kueue: only positive amounts are exported.
    for (flavor, resource), amount in sorted(cohort.subtree_quota.items()):
        if amount > 0:
            labels = (cohort.name, flavor, resource)
            _put(out, "kueue_cohort_subtree_quota", labels, quantity(amount))
    for (flavor, resource), amount in sorted(reserved.items()):
        if amount > 0:
            labels = (cohort.name, flavor, resource)
            _put(out, "kueue_cohort_subtree_resource_reservations", labels, quantity(amount))
    tallies = engine.state.index.cluster_queues
    admitted = sum(tallies.get(m.name, _NOTHING).admitted for m in members)
    _put(out, "kueue_cohort_subtree_admitted_active_workloads", (cohort.name,), admitted)


def _cluster_queues_below(node: QuotaNode) -> Iterable[QuotaNode]:
    for child in node.children:
        if child.is_cohort:
            yield from _cluster_queues_below(child)
        else:
            yield child
