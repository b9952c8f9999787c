"""The engine's view of configuration objects.

Indexes flavors, queues, cohorts and classes by name, and namespaces by cluster and name;
builds the quota tree and each ClusterQueue's layout; answers the questions the round asks
(which ClusterQueue serves a workload, may it be admitted there at all, which checks does it
need). Who holds quota is `muster.core.usage`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from muster.api.model import (
    AdmissionCheck,
    AdmissionMode,
    ApiObject,
    ClusterQueue,
    Cohort,
    FairSharingStrategy,
    KueueConfig,
    LimitRange,
    LocalQueue,
    Namespace,
    PriorityClass,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    RuntimeClass,
    StopPolicy,
    WithinClusterQueue,
    Workload,
    WorkloadPriorityClass,
)
from muster.api.wellknown import MULTIKUEUE_CONTROLLER
from muster.core.flavors import Assignment, QueueLayout
from muster.core.limit_ranges import NO_RUNTIME_CLASSES, Summary, summarize
from muster.core.matching import selector_matches
from muster.core.quota import QuotaNode, QuotaTree, tree_id

if TYPE_CHECKING:
    from muster.core.records import WorkloadRecord

Problem = tuple[str, str]  # (reason, message)
NAMESPACE_MISMATCH = "workload namespace doesn't match ClusterQueue selector"


class Configuration:
    def __init__(self, kueue: KueueConfig) -> None:
        self.kueue = kueue
        self.flavors: dict[str, ResourceFlavor] = {}
        self.cluster_queues: dict[str, ClusterQueue] = {}
        self.cohorts: dict[str, Cohort] = {}
        self.local_queues: dict[str, LocalQueue] = {}
        self.workload_priority_classes: dict[str, WorkloadPriorityClass] = {}
        self.priority_classes: dict[str, PriorityClass] = {}
        self.admission_checks: dict[str, AdmissionCheck] = {}
        # Each cluster has its own Namespaces (muster.core.config_owners): cluster -> name ->
        # Namespace. A LocalQueue lives in a namespace of the cluster that applied it.
        self.namespaces: dict[str, dict[str, Namespace]] = {}
        self.local_queue_clusters: dict[str, str] = {}  # LocalQueue key -> its cluster
        # LimitRanges, each cluster's own as Namespaces are: cluster -> namespace -> name ->.
        self.limit_ranges: dict[str, dict[str, dict[str, LimitRange]]] = {}
        self._limit_summaries: dict[tuple[str, str], Summary | None] = {}  # merged once
        # RuntimeClasses, each cluster's own as its Namespaces: cluster -> name ->.
        self.runtime_classes: dict[str, dict[str, RuntimeClass]] = {}
        self.tree = QuotaTree()
        self.layouts: dict[str, QueueLayout] = {}
        self.inactive: dict[str, Problem] = {}
        self._members: dict[str, dict[str, QuotaNode]] = {}  # root name -> CQ nodes
        self.roots: dict[str, QuotaNode] = {}  # ClusterQueue name -> the root of its tree
        # Bumped when the tree is rebuilt; with its root's `epoch` (bumped whenever who holds
        # what there changes), says whether a cached decision about a tree still holds.
        self.epoch = 0

    def put(self, obj: ApiObject, *, cluster: str = "") -> None:
        """Create or replace `obj`, applied from `cluster` ("": none named, as in simulate)."""
        if isinstance(obj, KueueConfig):
            self.kueue = obj
            return
        name = obj.meta.name
        match obj:
            case ResourceFlavor():
                self.flavors[name] = obj
            case ClusterQueue():
                self.cluster_queues[name] = obj
            case Cohort():
                self.cohorts[name] = obj
            case LocalQueue():
                self.local_queues[obj.key] = obj
                self.local_queue_clusters[obj.key] = cluster
            case WorkloadPriorityClass():
                self.workload_priority_classes[name] = obj
            case PriorityClass():
                self.priority_classes[name] = obj
            case AdmissionCheck():
                self.admission_checks[name] = obj
            case Namespace():
                self.namespaces.setdefault(cluster, {})[name] = obj
            case LimitRange():
                namespaces = self.limit_ranges.setdefault(cluster, {})
                namespaces.setdefault(obj.meta.namespace, {})[name] = obj
                self._limit_summaries.pop((cluster, obj.meta.namespace), None)
            case RuntimeClass():
                self.runtime_classes.setdefault(cluster, {})[name] = obj
            case Workload():
                raise TypeError("workloads are submitted, not applied")

    def remove(self, kind: str, name: str, namespace: str = "", *, cluster: str = "") -> bool:
        """Forget a configuration object (a Namespace: `cluster`'s); True if there was one."""
        if kind == "Namespace":
            return self.namespaces.get(cluster, {}).pop(name, None) is not None
        if kind == "RuntimeClass":
            return self.runtime_classes.get(cluster, {}).pop(name, None) is not None
        if kind == "LimitRange":
            self._limit_summaries.pop((cluster, namespace), None)
            ranges = self.limit_ranges.get(cluster, {}).get(namespace, {})
            return ranges.pop(name, None) is not None
        if kind == "LocalQueue":
            self.local_queue_clusters.pop(f"{namespace}/{name}", None)
        tables: dict[str, dict[str, Any]] = {
            "ResourceFlavor": self.flavors,
            "ClusterQueue": self.cluster_queues,
            "Cohort": self.cohorts,
            "LocalQueue": self.local_queues,
            "WorkloadPriorityClass": self.workload_priority_classes,
            "PriorityClass": self.priority_classes,
            "AdmissionCheck": self.admission_checks,
        }
        table = tables.get(kind)
        key = f"{namespace}/{name}" if kind == "LocalQueue" else name
        return table is not None and table.pop(key, None) is not None

    # --- building ------------------------------------------------------------------------

    def build(self) -> None:
        """Rebuild the quota tree (with no usage: `Usage.rebuild` carries it over) and layouts."""
        self.epoch += 1
        self.tree = tree = QuotaTree()
        self.inactive = {}
        cycles = cohort_cycles(self.cohorts)
        for name in sorted(self.cohorts):
            cohort = self.cohorts[name]
            node = tree.cohort(name)
            node.set_groups(cohort.resource_groups)
            node.weight = cohort.fair_sharing_weight
            if cohort.parent and name not in cycles:
                tree.link(node, cohort.parent)
        fair = self.fair_sharing_enabled
        for name in sorted(self.cluster_queues):
            cq = self.cluster_queues[name]
            node = tree.cluster_queues[name] = QuotaNode(name, is_cohort=False)
            node.set_groups(cq.resource_groups)
            node.weight = cq.fair_sharing_weight
            tree.link(node, cq.cohort)
            self.layouts[name] = QueueLayout.of(cq, fair_sharing=fair)
            problem = self._inactivity(cq, cycles)
            if problem is not None:
                self.inactive[name] = problem
        self._members = {}
        self.roots = {}
        for name, node in tree.cluster_queues.items():
            self.roots[name] = node.root()
            self._members.setdefault(tree_id(self.roots[name]), {})[name] = node

    def _inactivity(
        self, cq: ClusterQueue, cycles: Mapping[str, tuple[str, ...]]
    ) -> Problem | None:
        missing = sorted(
            {f.name for g in cq.resource_groups for f in g.flavors} - self.flavors.keys()
        )
        if missing:
            listed = " ".join(missing)
            return "FlavorNotFound", f"references missing ResourceFlavor(s): [{listed}]"
        missing = sorted({c.name for c in cq.admission_checks} - self.admission_checks.keys())
        if missing:
            listed = " ".join(missing)
            return "AdmissionCheckNotFound", f"references missing AdmissionCheck(s): [{listed}]"
        if cq.stop_policy is not StopPolicy.NONE:
            return "Stopped", "is stopped"
        loop = cycles.get(cq.cohort or "")
        if loop is not None:
            # Differs from Kueue, whose snapshot skips such queues without saying why on the
            # ClusterQueue: the condition names the cycle, so it can be fixed.
            shown = " -> ".join((*loop, loop[0]))
            where = "is part of" if cq.cohort in loop else "leads into"
            return "CohortCycle", f"cohort {cq.cohort} {where} the cohort cycle {shown}"
        return None

    # --- questions -----------------------------------------------------------------------

    @property
    def fair_sharing_enabled(self) -> bool:
        return self.kueue.fair_sharing.enable

    @property
    def fair_sharing_strategies(self) -> tuple[FairSharingStrategy, ...] | None:
        fs = self.kueue.fair_sharing
        return fs.preemption_strategies if fs.enable else None

    @property
    def partial_admission(self) -> bool:
        return self.kueue.partial_admission

    def reason(self, granular: str, fallback: str) -> str:
        """Kueue's UnadmittedWorkloadReasonWithFallback."""
        return granular if self.kueue.granular_pending_reasons else fallback

    def priority_of(self, wl: Workload) -> int:
        """spec.priority, else the named class's value, else the global default, else 0."""
        if wl.priority is not None:
            return wl.priority
        name = wl.priority_class_name
        if name:
            if wl.priority_class_source != "scheduling.k8s.io/priorityclass":
                wpc = self.workload_priority_classes.get(name)
                if wpc is not None:
                    return wpc.value
            pc = self.priority_classes.get(name)
            if pc is not None:
                return pc.value
        defaults = [pc.value for pc in self.priority_classes.values() if pc.global_default]
        return max(defaults, default=0)

    def resolve_queue(self, r: WorkloadRecord) -> tuple[str | None, str | None]:
        """The ClusterQueue serving `r`'s LocalQueue, and why not if there is none."""
        lq = self.local_queues.get(r.local_queue)
        if lq is None:
            return None, f"LocalQueue {r.local_queue.split('/', 1)[1]} doesn't exist"
        if lq.cluster_queue not in self.cluster_queues:
            return lq.cluster_queue, f"ClusterQueue {lq.cluster_queue} doesn't exist"
        return lq.cluster_queue, None

    def best_effort(self, cq: str) -> bool:
        return self.cluster_queues[cq].queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO

    def usage_based(self, cq: str) -> bool:
        """Whether `cq` orders by its LocalQueues' usage (admission fair sharing configured,
        `admissionScope.admissionMode: UsageBasedAdmissionFairSharing`), whatever its queueing
        strategy (Kueue's ResourceWeights and shouldApplyEntryPenalty read only the mode)."""
        queue = self.cluster_queues.get(cq)
        return (
            self.kueue.admission_fair_sharing is not None
            and queue is not None
            and queue.admission_mode is AdmissionMode.USAGE_BASED
        )

    def limit_summary(self, local_queue: str, namespace: str) -> Summary | None:
        """The LimitRanges of `namespace` in the cluster of `local_queue` (as its Namespace),
        merged; None when it has none."""
        if not self.limit_ranges:
            return None  # most installations: no LimitRange anywhere, nothing to look up
        cluster = self.local_queue_clusters.get(local_queue, "")
        key = (cluster, namespace)
        if key not in self._limit_summaries:
            ranges = self.limit_ranges.get(cluster, {}).get(namespace, {})
            self._limit_summaries[key] = summarize(ranges.values())
        return self._limit_summaries[key]

    def runtime_classes_of(self, local_queue: str) -> Mapping[str, RuntimeClass]:
        """The RuntimeClasses of the cluster of `local_queue` (as its Namespace), by name."""
        if not self.runtime_classes:
            return NO_RUNTIME_CLASSES
        return self.runtime_classes.get(self.local_queue_clusters.get(local_queue, ""), {})

    def admissibility(self, r: WorkloadRecord) -> Problem | None:
        """Why `r` cannot be admitted in its ClusterQueue whatever the quota, or None."""
        cq = self.cluster_queues[r.cluster_queue]
        # Kueue's workload controller (getQueueBlocker) and scheduler (nominate) words.
        if r.cluster_queue in self.inactive:
            return self.reason("Suspended", "Inadmissible"), f"ClusterQueue {cq.name} is inactive"
        lq = self.local_queues[r.local_queue]
        if lq.stop_policy is not StopPolicy.NONE:
            return self.reason(
                "Suspended", "Inadmissible"
            ), f"LocalQueue {lq.meta.name} is inactive"
        ns_name = r.wl.meta.namespace
        # The namespace of the cluster whose LocalQueue the workload uses: another cluster's
        # Namespace of the same name (a MultiKueue worker's) says nothing about this one.
        ns = self.namespaces.get(self.local_queue_clusters.get(r.local_queue, ""), {}).get(ns_name)
        labels = {"kubernetes.io/metadata.name": ns_name, **(ns.meta.labels if ns else {})}
        if cq.namespace_selector is None or not selector_matches(cq.namespace_selector, labels):
            return self.reason("Misconfigured", "Pending"), NAMESPACE_MISMATCH
        if r.resource_problem is not None:  # Kueue: ValidateResources, ValidateLimitRange
            return self.reason("Misconfigured", "Pending"), r.resource_problem
        return None

    def drain_reason(self, cq: str, lq: str) -> Problem | None:
        """Why HoldAndDrain evicts an admitted workload (the LocalQueue is looked at first)."""
        local = self.local_queues.get(lq)
        if local is not None and local.stop_policy is StopPolicy.HOLD_AND_DRAIN:
            return "LocalQueueStopped", "The LocalQueue is stopped"
        queue = self.cluster_queues.get(cq)
        if queue is not None and queue.stop_policy is StopPolicy.HOLD_AND_DRAIN:
            return "ClusterQueueStopped", "The ClusterQueue is stopped"
        return None

    def stop_reason(self, cq: str, lq: str) -> Problem | None:
        """Why a stopped queue (Hold or HoldAndDrain) takes back quota only reserved."""
        suspended = self.reason("Suspended", "Inadmissible")
        local = self.local_queues.get(lq)
        if local is not None and local.stop_policy is not StopPolicy.NONE:
            return suspended, f"LocalQueue {local.meta.name} is stopped"
        queue = self.cluster_queues.get(cq)
        if queue is not None and queue.stop_policy is not StopPolicy.NONE:
            return suspended, f"ClusterQueue {cq} is stopped"
        return None

    def checks_for(self, cq: str, a: Assignment) -> list[str]:
        """Admission checks that apply to this assignment (admissionChecksStrategy onFlavors)."""
        used = {f for ps in a.pod_sets for f in ps.flavors.values()}
        return [
            rule.name
            for rule in self.cluster_queues[cq].admission_checks
            if not rule.on_flavors or used & set(rule.on_flavors)
        ]

    def names_check(self, cq: str, check: str) -> bool:
        """Whether ClusterQueue `cq` (if it exists) requires admission check `check`, for some
        flavor at least."""
        queue = self.cluster_queues.get(cq)
        return queue is not None and any(rule.name == check for rule in queue.admission_checks)

    def keeps_told_check(self, check: str) -> bool:
        """Whether a Ready or Pending `check` tells while the workload holds no quota is kept
        for its next reservation (Kueue's status keeps it until an eviction): any
        AdmissionCheck this configuration has, but MultiKueue's, whose Ready says a worker
        admitted one reservation (admission dispatches each anew)."""
        ac = self.admission_checks.get(check)
        return ac is not None and ac.controller_name != MULTIKUEUE_CONTROLLER

    def may_preempt(self, cq: str) -> bool:
        policy = self.cluster_queues[cq].preemption
        return (
            self.fair_sharing_enabled
            or policy.within_cluster_queue is not WithinClusterQueue.NEVER
            or policy.reclaim_within_cohort is not ReclaimWithinCohort.NEVER
        )

    def root_of(self, cq: str) -> QuotaNode:
        return self.roots[cq]

    def tree_members(self, cq: str) -> Mapping[str, QuotaNode]:
        return self._members[tree_id(self.tree.cluster_queues[cq].root())]


def cohort_cycles(cohorts: Mapping[str, Cohort]) -> dict[str, tuple[str, ...]]:
    """Every Cohort whose chain of parents loops, with the loop it reaches.

    Kueue's HasCycle holds for a Cohort on a loop and for one whose parents lead into one; the
    loop is named from its smallest name, so the answer does not depend on names or order.
    """
    found: dict[str, tuple[str, ...]] = {}
    for name in sorted(cohorts):
        chain: list[str] = []
        at: dict[str, int] = {}
        node: str | None = name
        while node is not None and node not in at and node not in found:
            at[node] = len(chain)
            chain.append(node)
            cohort = cohorts.get(node)
            node = cohort.parent if cohort is not None else None
        if node is None:
            continue
        if node in found:
            loop = found[node]
        else:
            ring = chain[at[node] :]
            start = ring.index(min(ring))
            loop = tuple(ring[start:] + ring[:start])
        for member in chain:
            found[member] = loop
    return found
