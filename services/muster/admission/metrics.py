"""Admission's metrics: Kueue's series for the trees this replica owns, its own rounds, and
its step-downs (`muster_admission_step_downs_total{shard,cause}`).

`AdmissionMetrics` is what `Rounds` reports each round to (`round`, `published`) and what the
visibility loop refreshes the gauges through (`refresh_gauges`). The mappings themselves are
pure (`muster.metrics.kueue_events`, `kueue_gauges`); this module reads the replica's state
for them: each workload's queues and priority class from the engine's record, ownership from
the sharding, worker clusters from MultiKueue dispatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry

from muster.admission.facts import Delete, Fact
from muster.admission.lease import CAUSES
from muster.admission.state import AdmissionState
from muster.api.model import WorkloadKey
from muster.core.dispatch import Route, is_multikueue, route_of
from muster.core.events import Event
from muster.metrics.kueue_events import KueueRecorder, WorkloadFacts
from muster.metrics.kueue_gauges import queue_gauges
from muster.metrics.kueue_series import KueueSeries
from muster.metrics.services import AdmissionSeries


class ReplicaSeries:
    """The series of one admission process, registered once in `registry`: its terms and
    rebuilds (an `AdmissionMetrics` each) report to them."""

    def __init__(
        self, registry: CollectorRegistry, *, shard: int, clock: Callable[[], float] = time.time
    ) -> None:
        self.kueue = KueueSeries(registry)
        self.own = AdmissionSeries(registry, shard=shard, clock=clock, step_down_causes=CAUSES)

    def stepped_down(self, cause: str) -> None:
        """A term ended with the lease lost (`muster.bus.lease.CAUSES`)."""
        self.own.stepped_down(cause)


class AdmissionMetrics:
    """Kueue's series and `muster_admission_*` of one life of an admission replica (from a
    rebuild to the next), reading its state."""

    def __init__(
        self,
        series: ReplicaSeries,
        state: AdmissionState,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.kueue = series.kueue
        self.own = series.own
        self.recorder = KueueRecorder()
        self.clock = clock

    def round(
        self, facts: Sequence[Fact], events: Sequence[Event], *, decide_s: float | None
    ) -> None:
        """A round applied `facts` and its engine reported `events` (before they are published:
        finished workloads are still in the engine). `decide_s`: how long it took; None for
        what taking ownership decided (no admission attempt)."""
        for fact in facts:
            if isinstance(fact, Delete):
                self.recorder.forget(fact.key)
        samples = self.recorder.record(events, self.facts_of)
        if decide_s is not None:
            samples += self.recorder.attempt(events, decide_s)
            self.own.decided(decide_s, facts=len(facts), decisions=len(events))
        self.kueue.add(samples)

    def published(self, seconds: float) -> None:
        self.own.published(seconds)

    def refresh_gauges(self) -> None:
        """Recompute every Kueue gauge from the engine (call between rounds)."""
        sharding = self.state.sharding
        self.kueue.set_gauges(
            queue_gauges(
                self.state.engine,
                owns_tree=sharding.owns_tree,
                owns_local_queue=sharding.owns_local_queue,
                workers=self.workers(),
            )
        )

    def facts_of(self, key: str) -> WorkloadFacts | None:
        engine = self.state.engine
        r = engine.records.get(WorkloadKey(key))
        if r is None or not r.cluster_queue:
            return None
        node = engine.config.tree.cluster_queues.get(r.cluster_queue)
        cohorts: list[str] = []
        parent = node.parent if node is not None else None
        while parent is not None:
            cohorts.append(parent.name)
            parent = parent.parent
        namespace, _, local_queue = r.local_queue.partition("/")
        return WorkloadFacts(
            cluster_queue=r.cluster_queue,
            namespace=namespace,
            local_queue=local_queue,
            priority_class=r.wl.priority_class_name or "",
            cohorts=tuple(cohorts),
            created_s=r.queue_ts,
            worker_cluster=self.state.dispatch.target(r.key) or "",
        )

    def workers(self) -> dict[str, dict[str, bool]]:
        """ClusterQueue → its MultiKueue worker clusters → whether each is active (reporting)."""
        dispatch, now_s = self.state.dispatch, self.clock()
        out: dict[str, dict[str, bool]] = {}
        for name, cq in self.state.engine.config.cluster_queues.items():
            for rule in cq.admission_checks:
                check = dispatch.checks.get(rule.name)
                if check is None or not is_multikueue(check):
                    continue
                route = route_of(check, dispatch.configs)
                if not isinstance(route, Route):
                    continue
                for cluster in route.clusters:
                    alive = cluster in dispatch.capacity and not dispatch.is_lost(
                        cluster, now_s=now_s
                    )
                    out.setdefault(name, {})[cluster] = alive
        return out
