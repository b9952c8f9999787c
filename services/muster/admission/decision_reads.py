"""What an admission round publishes, and what translating it reads.

`DecisionReads` turns a round's engine events into the payloads to publish
(`decisions.decisions_from`, with itself as the `DecisionContext`), records our own once
stored (read from what was built by `own_records`, not decoded again), and holds the routing
view of this shard behind them: a workload's alternatives in its own cohort trees only
(`routing.routable`), the note naming the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from muster.admission.admission_proto import PayloadParts
from muster.admission.decisions import Decision, Manifests, decisions_from
from muster.admission.fact_reader import recorded_of
from muster.admission.facts import RECORDED, Recorded
from muster.admission.ledger import Entry
from muster.admission.replica_parts import PENDING_PHASE, ReplicaParts
from muster.admission.routing import WorkloadRoute, routable, stays_event
from muster.api.model import Admission, ResourceFlavor, Workload, WorkloadKey
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event, EventType
from muster.core.routing import run_seconds_on


def own_records(decisions: Sequence[Decision], envs: Sequence[pb.Envelope]) -> dict[str, Recorded]:
    """The `Recorded` of each of `decisions` enveloped as `envs` (`decisions.envelopes_of`, in
    order), by event id: what `fact_of` reads from each once stored, its admission the model
    one its payload was built from rather than parsed back from the payload's quantity strings
    (milli-units both ways: `admission_from_proto(admission_to_proto(a)) == a`). Reading them
    back from the envelopes cost twice as much (issue 19, docs/benchmarks.md)."""
    return {
        env.event_id: recorded_of(env, d.field, built=d.admission)
        for d, env in zip(decisions, envs, strict=True)
        if d.field in RECORDED
    }


class DecisionReads(ReplicaParts):
    """A round's publish set, and the `decisions.DecisionContext` it is translated with."""

    _parts: PayloadParts | None = None  # the admissions' payload parts, kept across rounds

    # --- a round's publish set ------------------------------------------------------------

    def decisions(self, events: Sequence[Event]) -> list[Decision]:
        """The payloads to publish for a round's `events`; then the workloads that finished
        or were deleted in that round leave the engine (these were their last readers)."""
        news = [e for e in events if not self._repeats_route(e)]
        if self._parts is None:
            self._parts = PayloadParts()
        decisions = decisions_from(news, self, parts=self._parts)
        decisions += self.dispatch.take_decisions(self)
        done, self._done = self._done, []
        for key in done:
            self.engine.forget(key)
            self.notes.pop(key, None)
        return decisions

    def _repeats_route(self, e: Event) -> bool:
        """Whether `e` says a workload stays where its last recorded Routed already put it
        (a rebuilt engine announces a `fastest` route afresh): no news, not published."""
        if e.type is not EventType.ROUTED or e.from_queue != e.to_queue:
            return False
        key = WorkloadKey(e.object)
        entry, r = self.ledger.get(key), self.engine.records.get(key)
        return entry is not None and r is not None and entry.routed_queue == r.wl.queue_name

    def record_published(self, published: Sequence[Recorded]) -> None:
        """Our own decisions, once JetStream has them: into the ledger."""
        for fact in published:
            self.ledger.record(fact)

    # --- routing --------------------------------------------------------------------------

    def _routable(self, entry: Entry) -> Workload:
        """The workload as this shard routes it (`routing.routable`); remembers the note.
        One whose routed requests a cluster refused has no alternatives any more."""
        if entry.declared_only:
            self.notes.pop(entry.key, None)
            return msgspec.structs.replace(entry.workload, alternatives=())
        wl, note = routable(entry.workload, self.sharding, keep=entry.routed_queue)
        if note:
            self.notes[entry.key] = note
        else:
            self.notes.pop(entry.key, None)
        return wl

    def _stays_unrouted(self, entry: Entry, wl: Workload, now_s: float) -> list[Event]:
        """The Routed event of a pending workload whose alternatives (none recorded yet) are
        all another shard's: it stays, and says so once."""
        left_out = entry.workload.alternatives and not wl.alternatives
        if not left_out or entry.routed_queue or self.engine.phase(entry.key) != PENDING_PHASE:
            return []
        event = stays_event(self.engine, self.routing, entry.workload, now_s=now_s)
        return [] if event is None else [event]

    # --- DecisionContext ------------------------------------------------------------------

    def admission_of(self, key: WorkloadKey) -> Admission | None:
        r = self.engine.records.get(key)
        if r is None or r.assignment is None:
            return None
        return Admission(cluster_queue=r.cluster_queue, pod_set_assignments=r.assignment.pod_sets)

    def checks_of(self, key: WorkloadKey) -> Sequence[str]:
        r = self.engine.records.get(key)
        if r is None:
            return ()
        return tuple(sorted(c for c, s in r.checks.items() if s != "Ready"))

    def has_checks(self, key: WorkloadKey) -> bool:
        r = self.engine.records.get(key)
        return r is not None and bool(r.checks)

    def cluster_queue_of(self, key: WorkloadKey) -> str:
        r = self.engine.records.get(key)
        return "" if r is None else r.cluster_queue

    def cluster_of(self, key: WorkloadKey) -> str:
        target = self.dispatch.target(key)
        if target is not None:
            return target  # dispatched (MultiKueue): its decisions go to that cluster
        entry = self.ledger.get(key)
        return self.default_cluster if entry is None or not entry.cluster else entry.cluster

    def generation_of(self, key: WorkloadKey) -> int:
        entry = self.ledger.get(key)
        return 0 if entry is None else entry.generation

    def submitted_id_of(self, key: WorkloadKey) -> str:
        entry = self.ledger.get(key)
        return "" if entry is None else entry.submitted_id

    def manifests_of(self, key: WorkloadKey) -> Manifests:
        return self.ledger.manifests(key, default_cluster=self.default_cluster)

    def route_of(self, key: WorkloadKey) -> WorkloadRoute | None:
        entry, r = self.ledger.get(key), self.engine.records.get(key)
        if entry is None or r is None or not entry.workload.alternatives:
            return None
        queue = r.wl.queue_name
        return WorkloadRoute(
            queue_name=queue,
            away=queue != entry.workload.queue_name,
            pod_sets=r.wl.pod_sets,
            run_s=run_seconds_on(entry.workload, queue),
            note=self.notes.get(key, ""),
        )

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]:
        return self.engine.config.flavors
