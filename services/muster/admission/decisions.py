"""Engine events to the payloads admission publishes, and those to envelopes. Pure.

`decisions_from(events, ctx)` turns what one `Engine` call reported into `Decision`s, the
payloads admission publishes (docs/events.md), and `envelopes_of` wraps them for the bus:

    Pending       -> workload.pending
    QuotaReserved -> workload.quota_reserved (admission, checks still to pass); none when
                     no check is to pass and the Admitted follows: it says both
    Admitted      -> workload.admitted (admission, node labels and tolerations of its flavors;
                     `with_reservation` when it also tells the QuotaReserved)
    Preempted     -> workload.preemption_requested, one per preemptor, listing its victims
    Evicted       -> workload.evicted (quota held until eviction_completed)
    Deactivated   -> workload.evicted with reason "InactiveWorkload" (quota released at once)
    Requeued      -> workload.requeued
    Routed        -> workload.routed (the LocalQueue it goes through now, and the policy)

A routed workload's `admitted` carries, per podset, the requests and run time of the
alternative it runs on (`PodSetPlacementHints.requests` and `annotations`), so whoever starts
its pods starts them as routed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec
from google.protobuf.message import Message

from muster.admission.admission_proto import PayloadParts
from muster.admission.routing import WorkloadRoute, routed_payload
from muster.api.model import (
    Admission,
    ResourceFlavor,
    WorkloadKey,
)
from muster.bus.envelope import new_event
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event, EventType
from muster.payloads import (
    MANIFEST_COPY_LIMIT,
)

# Kueue's WorkloadEvictedByDeactivation: the workload was deactivated (a check rejected it
# while it only reserved quota; before November 2026 also the requeuing limit, now evicted
# DeactivatedDueToRequeuingLimitExceeded at the timeout); it gives its quota back at once and
# is not requeued.
DEACTIVATED = "InactiveWorkload"


# Structs, not frozen dataclasses: one of each per decision, and a frozen dataclass's
# __init__ sets every field through object.__setattr__ (three times the time; issue 19).
class Manifests(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What a workload's `admitted` carries of its submission, so a binder that never saw the
    `submitted` (or a worker cluster's, which must create a copy) has it."""

    workload_json: str = ""  # the Kueue Workload as submitted
    owner_json: str = ""  # the Job it stands for
    origin_cluster: str = ""  # where it was submitted


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """One event to publish: the Envelope payload `field` with `payload`, about `workload`.

    `n` tells apart events of one type about one workload from one cause (part of the id).
    """

    field: str
    payload: Message
    workload: str
    cluster: str
    generation: int
    time_s: float
    n: int = 0
    submitted_id: str = ""  # the event id of the `submitted` it is about
    # What a quota_reserved's or admitted's payload was built from: the ledger records it from
    # here once stored (`decision_reads.own_records`), not parsed back from the payload's strings.
    admission: Admission | None = None


class DecisionContext(Protocol):
    """What translating engine events needs to know beyond the events themselves."""

    def admission_of(self, key: WorkloadKey) -> Admission | None: ...

    def checks_of(self, key: WorkloadKey) -> Sequence[str]:
        """The admission checks of `key`'s reservation still to pass (not Ready)."""
        ...

    def has_checks(self, key: WorkloadKey) -> bool:
        """Whether `key`'s reservation has any admission check, passed or not."""
        ...

    def cluster_queue_of(self, key: WorkloadKey) -> str: ...

    def cluster_of(self, key: WorkloadKey) -> str: ...

    def generation_of(self, key: WorkloadKey) -> int: ...

    def submitted_id_of(self, key: WorkloadKey) -> str:
        """The event id of the `submitted` the live workload `key` came from ("" unknown)."""
        ...

    def manifests_of(self, key: WorkloadKey) -> Manifests:
        """The workload's manifests as submitted, and where (empty when not known)."""
        ...

    def route_of(self, key: WorkloadKey) -> WorkloadRoute | None:
        """None for a workload without alternatives (or one no longer known)."""
        ...

    @property
    def flavors(self) -> Mapping[str, ResourceFlavor]: ...


def decisions_from(
    events: Sequence[Event], ctx: DecisionContext, *, parts: PayloadParts | None = None
) -> list[Decision]:
    """The payloads to publish for `events`, in order; see the module docstring for the map.

    An Evicted immediately followed by a Deactivated of the same workload is one eviction with
    reason InactiveWorkload. Victims of one preemptor are listed in one preemption_requested,
    placed where its first victim was reported. `parts`: the admissions' payload parts built
    before (a replica keeps one for all its rounds); a new one for these events alone if None.
    """
    parts = PayloadParts() if parts is None else parts
    out: list[Decision] = []
    at_once: int | None = None  # the last QuotaReserved that its Admitted right after tells
    counts: dict[tuple[str, str], int] = {}
    preemptions: dict[str, pb.PreemptionRequested] = {}

    def add(
        field: str,
        payload: Message,
        e: Event,
        *,
        workload: str | None = None,
        admission: Admission | None = None,
    ) -> None:
        key = WorkloadKey(workload if workload is not None else e.object)
        n = counts.get((field, key), 0)
        counts[(field, key)] = n + 1
        out.append(
            Decision(
                field=field,
                payload=payload,
                workload=key,
                cluster=ctx.cluster_of(key),
                generation=ctx.generation_of(key),
                time_s=e.time,
                n=n,
                submitted_id=ctx.submitted_id_of(key),
                admission=admission,
            )
        )

    for i, e in enumerate(events):
        key = WorkloadKey(e.object)
        match e.type:
            case EventType.PENDING:
                cq = ctx.cluster_queue_of(key)
                add(
                    "pending",
                    pb.WorkloadPending(reason=e.reason, message=e.message, cluster_queue=cq),
                    e,
                )
            case EventType.QUOTA_RESERVED:
                if _admitted_at_once(events, i, ctx):
                    at_once = i
                    continue  # its `admitted` tells both, as Kueue's one status update does
                admission = ctx.admission_of(key)
                if admission is None:
                    continue  # nothing held any more: a later event of this batch says why
                payload = parts.quota_reserved(admission, ctx.checks_of(key))
                add("quota_reserved", payload, e, admission=admission)
            case EventType.ADMITTED:
                admission = ctx.admission_of(key)
                if admission is None:
                    continue
                manifests = ctx.manifests_of(key)
                admitted = parts.admitted(admission, ctx.flavors, ctx.route_of(key))
                admitted.manifest_json = _copied(manifests.workload_json)
                admitted.owner_manifest_json = _copied(manifests.owner_json)
                admitted.origin_cluster = manifests.origin_cluster
                admitted.with_reservation = at_once == i - 1
                add("admitted", admitted, e, admission=admission)
            case EventType.PREEMPTED:
                victim = pb.Victim(
                    workload=key, reason=e.reason, message=e.message, cluster=ctx.cluster_of(key)
                )
                request = preemptions.get(e.by)
                if request is None:
                    request = preemptions[e.by] = pb.PreemptionRequested(preemptor=e.by)
                    add("preemption_requested", request, e, workload=e.by)
                request.victims.append(victim)
            case EventType.EVICTED:
                nxt = events[i + 1] if i + 1 < len(events) else None
                if nxt is not None and nxt.type is EventType.DEACTIVATED and nxt.object == e.object:
                    continue  # reported once, as the deactivation that follows
                evicted = pb.WorkloadEvicted(reason=e.reason, message=e.message, preemptor=e.by)
                add("evicted", evicted, e)
            case EventType.DEACTIVATED:
                add("evicted", pb.WorkloadEvicted(reason=DEACTIVATED, message=e.message), e)
            case EventType.REQUEUED:
                add("requeued", pb.WorkloadRequeued(reason=e.reason, message=e.message), e)
            case EventType.ROUTED:
                add("routed", routed_payload(e, ctx.route_of(key)), e)
            case _:
                continue  # Submitted, Finished: facts others reported, not decisions
    return out


def _admitted_at_once(events: Sequence[Event], i: int, ctx: DecisionContext) -> bool:
    """Whether `events[i]` is a QuotaReserved of a workload with no admission check (one
    passed in the same round, as MultiKueue's, still counts), its Admitted right after it: one
    `admitted` then says both (docs/events.md, "Admitted with its reservation"), one event
    fewer per workload for every reader."""
    e = events[i]
    if e.type is not EventType.QUOTA_RESERVED or i + 1 >= len(events):
        return False
    nxt = events[i + 1]
    return (
        nxt.type is EventType.ADMITTED
        and nxt.object == e.object
        and not ctx.has_checks(WorkloadKey(e.object))
    )


def _copied(manifest: str) -> str:
    return manifest if len(manifest) <= MANIFEST_COPY_LIMIT else ""


def envelopes_of(
    decisions: Sequence[Decision], *, cause: pb.Envelope, source: str
) -> list[pb.Envelope]:
    """The envelopes to publish for `decisions`, with ids derived from `cause` (dedupe)."""
    out = []
    for d in decisions:
        env = new_event(
            d.field,
            d.payload,
            cluster=d.cluster,
            workload=d.workload,
            generation=d.generation,
            cause=cause,
            source=source,
            n=d.n,
            now_ns=int(d.time_s * 1e9),
        )
        env.submitted_id = d.submitted_id
        out.append(env)
    return out
