"""One head's admission attempt: its flavors, and the victims that make room if it needs any.

Kueue's getInitialAssignments: the full assignment if it fits; if it fits only by preempting,
the victims that make room; otherwise the largest partial admission (`minCount`) that fits, at
once or after preemption; if none does, the full assignment, short of what the smallest one
lacks (the head is retried once that is released). The flavor search simulates preemption per
flavor (Kueue's preemption oracle), so a flavor where nothing can be preempted is not taken for
one that can.
Reads the quota tree and the records; every tentative change is undone before returning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import msgspec

from muster.api.model import Workload, WorkloadKey
from muster.core.config import Configuration
from muster.core.flavors import Assignment, Fit, Mode, Rating, assign_flavors
from muster.core.partial import least_counts, reduce_counts
from muster.core.preemption import PreemptionRequest, TreeView, Victims, pick_victims
from muster.core.quota import FlavorResource, borrowing_level
from muster.core.reclaim import counts_after_reclaim, partial_counts
from muster.core.records import Phase, WorkloadRecord
from muster.core.usage import Usage


class Attempt(NamedTuple):
    assignment: Assignment
    victims: Victims | None  # set when the assignment fits once they are gone


class Attempts:
    """Computes attempts against the engine's configuration, usage and records."""

    def __init__(
        self,
        config: Configuration,
        usage: Usage,
        records: Mapping[WorkloadKey, WorkloadRecord],
        *,
        queue_usage: Callable[[str, str], float | None] = lambda cq, lq: None,
        clock: Callable[[], float] = lambda: 0.0,
    ):
        self.config = config
        self.usage = usage
        self.records = records
        self.queue_usage = queue_usage  # preemption's candidate order (admission fair sharing)
        self.clock = clock  # the instant those usages are for
        # Victims the oracle found for one (flavor, resource) and amount during the current
        # attempt: a one-resource workload asks for exactly those again.
        self._simulated: dict[tuple[FlavorResource, int], Victims | None] = {}
        # Attempts made since holders in their tree last changed (the fair-sharing order asks
        # for them too); `forget` drops one that no longer waits.
        self._head: WorkloadRecord  # whose flavors are being assigned (for the oracle)
        self._made: dict[WorkloadKey, tuple[Workload, tuple[object, ...], Attempt]] = {}

    def attempt(self, r: WorkloadRecord) -> Attempt:
        """Kueue's getInitialAssignments for head `r` of its ClusterQueue."""
        if not self.config.fair_sharing_enabled:
            return self._attempt(r)  # only the fair-sharing order asks twice
        stamp: tuple[object, ...] = (
            self.usage.stamp(r.cluster_queue),
            r.cluster_queue,
            r.priority,
            r.queue_ts,
        )
        if self.config.kueue.admission_fair_sharing is not None:
            stamp += (self.clock(),)  # LocalQueue usages, which order candidates, decay with time
        made = self._made.get(r.key)
        if made is not None and made[0] is r.wl and made[1] == stamp:
            return made[2]
        found = self._attempt(r)
        self._made[r.key] = (r.wl, stamp, found)
        return found

    def forget(self, key: WorkloadKey) -> None:
        self._made.pop(key, None)

    def _attempt(self, r: WorkloadRecord) -> Attempt:
        self._simulated = {}
        full = self.assign(r)
        if full.mode is Mode.FIT:
            return Attempt(full, None)
        if full.mode is Mode.PREEMPT:
            victims = self.victims(r, full)
            if victims is not None:
                return Attempt(full, victims)
        if self.config.partial_admission:
            tried: dict[tuple[int, ...], Assignment] = {}

            def admit(counts: list[int]) -> Attempt | None:
                a = tried[tuple(counts)] = self.assign(r, counts)
                if a.mode is Mode.FIT:
                    return Attempt(a, None)
                victims = self.victims(r, a) if a.mode is Mode.PREEMPT else None
                return Attempt(a, victims) if victims is not None else None

            reduced = reduce_counts(r.wl.pod_sets, admit)
            if reduced is not None:
                return reduced
            if tried:  # it may be partially admitted: it reports its full request (as Kueue)
                # but is worth a retry once what its minCounts lack is released, not what the
                # full request lacks: that may never be released (over the queue's maximum).
                least = tuple(least_counts(r.wl.pod_sets))
                smallest = tried.get(least) or self.assign(r, least)
                return Attempt(msgspec.structs.replace(full, shortages=smallest.shortages), None)
        return Attempt(full, None)

    def assign(self, r: WorkloadRecord, counts: Sequence[int] | None = None) -> Assignment:
        cq = r.cluster_queue
        self._head = r  # for the oracle
        return assign_flavors(
            r.wl.pod_sets,
            counts_after_reclaim(r.wl.pod_sets, r.reclaimable)
            if counts is None
            else partial_counts(r.wl.pod_sets, r.reclaimable, counts),
            node=self.config.tree.cluster_queues[cq],
            layout=self.config.layouts[cq],
            flavors=self.config.flavors,
            oracle=self._simulate,
        )

    def victims(self, r: WorkloadRecord, a: Assignment) -> Victims | None:
        """Kueue's GetTargets: the workloads to evict so that `a` fits, or None."""
        if len(a.usage) == 1 and a.short == a.usage.keys():
            ((fr, amount),) = a.usage.items()
            if (fr, amount) in self._simulated:
                return self._simulated[(fr, amount)]
        return pick_victims(self._request(r, a.usage, a.short), self._view(r))

    def _simulate(self, fr: FlavorResource, amount: int) -> Rating:
        """Kueue's SimulatePreemption for `amount` of one (flavor, resource) of the head's
        ClusterQueue: how the flavor would fit once the victims found are gone."""
        r = self._head
        node = self.config.tree.cluster_queues[r.cluster_queue]
        req = self._request(r, {fr: amount}, frozenset((fr,)))
        victims = self._simulated[(fr, amount)] = pick_victims(req, self._view(r))
        if victims is None:
            return Rating(Fit.NO_CANDIDATES, borrowing_level(node, fr, amount)[0])
        gone = [self.records[key] for key in victims.targets]
        nodes = self.config.tree.cluster_queues
        for v in gone:
            nodes[v.cluster_queue].add_usage(fr, -v.usage.get(fr, 0))
        try:
            level = borrowing_level(node, fr, amount)[0]
        finally:
            for v in gone:
                nodes[v.cluster_queue].add_usage(fr, v.usage.get(fr, 0))
        same = any(v.cluster_queue == r.cluster_queue for v in gone)
        return Rating(Fit.PREEMPT if same else Fit.RECLAIM, level)

    def _request(
        self,
        r: WorkloadRecord,
        usage: Mapping[FlavorResource, int],
        short: frozenset[FlavorResource],
    ) -> PreemptionRequest:
        return PreemptionRequest(
            cluster_queue=r.cluster_queue,
            priority=r.priority,
            queue_ts=r.queue_ts,
            seq=r.seq,
            policy=self.config.cluster_queues[r.cluster_queue].preemption,
            usage=usage,
            short=short,
        )

    def _view(self, r: WorkloadRecord) -> TreeView:
        holders = self.usage.holders
        key = r.key

        def holders_of(cq: str) -> list[WorkloadRecord]:
            # Workloads being evicted for `r` stay its candidates (Kueue orders them first), so
            # a preemptor tried again while they stop picks them again instead of more.
            return [
                h
                for h in holders.get(cq, {}).values()
                if h.phase is not Phase.EVICTING or h.evicted_by == key
            ]

        return TreeView(
            nodes=self.config.tree_members(r.cluster_queue),
            holders=holders_of,
            fair_sharing=self.config.fair_sharing_strategies,
            borrowers=self.usage.borrowers_in(r.cluster_queue),
            queue_usage=self.queue_usage,
        )
