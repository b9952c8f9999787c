"""Kueue's message on a preempted workload's Preempted and Evicted conditions (preemption.go)."""

from __future__ import annotations

from typing import Protocol

from muster.api.model import Workload
from muster.core.preemption_search import QuotaHolder
from muster.core.quota import QuotaTree


class Preemptor(Protocol):
    """The preempting workload, as its victims' message names it."""

    @property
    def wl(self) -> Workload: ...
    @property
    def cluster_queue(self) -> str: ...


_PREEMPTION_CAUSE = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
    "InCohortFairSharing": "Fair Sharing within the cohort",
}
_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


# The owners whose uid Kueue's job framework labels their Workload with (job-uid label).
_JOB_KINDS = frozenset({"Job", "JobSet"})


def preemption_message(
    preemptor: Preemptor, victim: QuotaHolder, reason: str, tree: QuotaTree
) -> str:
    """Kueue's message on a victim's Preempted and Evicted conditions (preemption.go)."""
    meta = preemptor.wl.meta
    job_uid = meta.labels.get(_JOB_UID_LABEL) or next(
        (o.uid for o in meta.owner_references if o.kind in _JOB_KINDS and o.uid), "UNKNOWN"
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
