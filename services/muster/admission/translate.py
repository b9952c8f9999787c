"""Envelopes to engine facts, and engine events to the envelopes' payloads. Pure.

`fact_of(envelope)` reads what a consumed event means for admission (a `Fact`), or None when
admission does not care. `decisions_from(events, ctx)` turns what one `Engine` call reported
into `Decision`s, the payloads admission publishes (docs/events.md):

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
from dataclasses import dataclass
from typing import Protocol

import msgspec
from google.protobuf.message import Message

from muster.admission.routing import WorkloadRoute, routed_payload
from muster.api import parse_quantity, quantities_to_strings
from muster.api.model import (
    Admission,
    ApiObject,
    KueueConfig,
    PodSetAssignment,
    ReclaimablePod,
    ResourceFlavor,
    Workload,
    WorkloadKey,
)
from muster.api.podspec import flavor_placement
from muster.api.wellknown import RUN_SECONDS_ANNOTATION
from muster.bus.envelope import new_event
from muster.bus.partitions import PARTITIONS, parse_token
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event, EventType
from muster.payloads import (
    MANIFEST_COPY_LIMIT,
    PayloadError,
    applied_object,
    check_transitioned_s,
    decode_manifest,
)

# Kueue's WorkloadEvictedByDeactivation: the workload was deactivated (a check rejected it
# while it only reserved quota; before November 2026 also the requeuing limit, now evicted
# DeactivatedDueToRequeuingLimitExceeded at the timeout); it gives its quota back at once and
# is not requeued.
DEACTIVATED = "InactiveWorkload"
GANG_REJECTED = "GangRejected"


class FactError(ValueError):
    """The event cannot be read (bad manifest): permanent, the message is dead-lettered."""


class ConfigRefusedError(FactError):
    """A configuration event from a cluster that does not own its object (the reason names
    both): dead-lettered, and never applied (`muster.core.config_owners`)."""


# --- facts ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Submit:
    workload: Workload
    cluster: str
    generation: int
    at_s: float
    manifest_json: str = ""  # as submitted: copied into its `admitted` (MANIFEST_COPY_LIMIT)
    partition: int | None = None  # the partition it was published in (None: none named)
    owner_manifest_json: str = ""  # the Job it stands for, likewise (MultiKueue copies it)
    event_id: str = ""  # of its `submitted`: what the decisions about it name (`submitted_id`)


@dataclass(frozen=True, slots=True)
class Manifests:
    """What a workload's `admitted` carries of its submission, so a binder that never saw the
    `submitted` (or a worker cluster's, which must create a copy) has it."""

    workload_json: str = ""  # the Kueue Workload as submitted
    owner_json: str = ""  # the Job it stands for
    origin_cluster: str = ""  # where it was submitted


@dataclass(frozen=True, slots=True)
class Finish:
    key: WorkloadKey
    at_s: float = 0.0  # its event's time: when its quota was released (0: not known)


@dataclass(frozen=True, slots=True)
class Delete:
    key: WorkloadKey
    at_s: float = 0.0  # likewise


@dataclass(frozen=True, slots=True)
class Stopped:
    """eviction_completed: the evicted workload's pods are gone.

    `eviction_id` names the eviction completed (the `evicted` event's id); "" in events
    written before binders named it, and in admission's own for a lost cluster.
    """

    key: WorkloadKey
    at_s: float
    eviction_id: str = ""


@dataclass(frozen=True, slots=True)
class PodsReady:
    key: WorkloadKey
    lost: bool = False  # readiness told before was lost (docs/events.md, "Readiness lost")
    at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class SetActive:
    """active_changed: spec.active set through the gateway (kueuectl's stop and resume)."""

    key: WorkloadKey
    active: bool


@dataclass(frozen=True, slots=True)
class SetReclaimable:
    """reclaimable_pods: the workload's pods that finished for good, the whole list now."""

    key: WorkloadKey
    pods: tuple[ReclaimablePod, ...]
    at_s: float = 0.0  # its event's time: when the pods were given back (0: not known)


@dataclass(frozen=True, slots=True)
class CheckUpdated:
    key: WorkloadKey
    check: str
    state: str
    message: str
    requeue_after_s: float = 0.0
    # When the check entered its state (its entry's lastTransitionTime, else the event's
    # time): a Retry's requeueAfterSeconds counts from it, as Kueue's GetMaxRetryTime.
    at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class GangRejected:
    key: WorkloadKey
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class RequestsRefused:
    """The cluster will not run the admitted workload with the requests it was admitted with
    (a routed Job): evicted, and back on its declared queue for good."""

    key: WorkloadKey
    message: str


@dataclass(frozen=True, slots=True)
class PlacementPreempted:
    """Gang placement needs these workloads' nodes: the Kueue ones among them are evicted here
    (admission owns their quota); gangpermit evicts the others itself."""

    gang: str
    victims: tuple[WorkloadKey, ...]


@dataclass(frozen=True, slots=True)
class ApplyConfig:
    obj: ApiObject
    kind: str
    name: str
    cluster: str


@dataclass(frozen=True, slots=True)
class DeleteConfig:
    kind: str
    name: str
    cluster: str = ""  # whose: a Namespace is deleted from that cluster's only


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """config.partition: who decides `partition` from this record on (`shard`), or a LocalQueue
    that left it. Admission's decisions about the partition are fenced on `sequence`."""

    partition: int
    sequence: int
    shard: int | None = None
    local_queue: str = ""  # "<namespace>/<name>"
    to_partition: int = 0
    adopted: bool = False
    # What the LocalQueue's retired workloads left in its admission fair sharing usage, as
    # read from `partition`'s history: (at_s, ((resource, amount), ...)); unchecked.
    carried: tuple[float, tuple[tuple[str, float], ...]] | None = None


@dataclass(frozen=True, slots=True)
class Recorded:
    """A decision an admission replica published: history to rebuild from, never re-decided.

    `kind` is the payload field: pending, quota_reserved, admitted, evicted, requeued or
    routed (`queue_name`: the LocalQueue it was routed to).
    """

    key: WorkloadKey
    kind: str
    source: str
    at_s: float
    event_id: str = ""  # of the decision (an eviction is named by it: `Stopped.eviction_id`)
    submitted_id: str = ""  # the `submitted` it decides about ("": an older writer's)
    reason: str = ""
    message: str = ""
    admission: Admission | None = None
    checks: tuple[str, ...] = ()
    queue_name: str = ""


Fact = (
    Submit
    | Finish
    | Delete
    | Stopped
    | PodsReady
    | SetActive
    | SetReclaimable
    | CheckUpdated
    | GangRejected
    | RequestsRefused
    | PlacementPreempted
    | ApplyConfig
    | DeleteConfig
    | PartitionRecord
    | Recorded
)

# The workload events `fact_of` reads (payload fields, which are also their subjects' last
# token): the facts, then the decisions recorded as history. Admission consumes only these.
WORKLOAD_FACTS = (
    "submitted",
    "finished",
    "deleted",
    "eviction_completed",
    "pods_ready",
    "running",  # with its pods ready (docs/events.md, "Running and ready")
    "admission_check",
    "gang_rejected",
    "requests_refused",
    "placement_preempted",
    "active_changed",
    "reclaimable_pods",
)
RECORDED = ("pending", "quota_reserved", "admitted", "evicted", "requeued", "routed")


def _reclaimable_pods(env: pb.Envelope) -> tuple[ReclaimablePod, ...]:
    pods = env.reclaimable_pods.pods
    for i, p in enumerate(pods):
        if not p.pod_set or p.count < 0:
            raise FactError(
                f"reclaimable_pods {env.workload}: pods[{i}] needs a pod_set and a count >= 0,"
                f" got {p.pod_set!r}, {p.count}"
            )
    return tuple(ReclaimablePod(name=p.pod_set, count=p.count) for p in pods)


def time_s_of(env: pb.Envelope) -> float:
    return env.time_unix_nano / 1e9


def fact_of(env: pb.Envelope, *, decoded: Workload | None = None) -> Fact | None:
    """What `env` means to admission, or None when nothing; raises FactError when unreadable.

    `decoded`: a `submitted`'s manifest as a replica decoded it before (a snapshot keeps it),
    so that a rebuild does not decode and validate every manifest again."""
    field = env.WhichOneof("payload")
    key = WorkloadKey(env.workload)
    match field:
        case "submitted":
            return _submit_of(env, decoded)
        case "finished":
            return Finish(key, at_s=time_s_of(env))
        case "deleted":
            return Delete(key, at_s=time_s_of(env))
        case "eviction_completed" if env.eviction_completed.pods:
            return None  # gang-permit's eviction of pods outside Kueue: no quota is held
        case "eviction_completed":
            named = env.eviction_completed.eviction_id
            return Stopped(key, at_s=time_s_of(env), eviction_id=named)
        case "pods_ready":
            return PodsReady(key, lost=env.pods_ready.lost, at_s=time_s_of(env))
        case "running":  # ready as it started: no pods_ready follows
            return PodsReady(key) if env.running.pods_ready else None
        case "active_changed":
            return SetActive(key, active=env.active_changed.active)
        case "reclaimable_pods":
            return SetReclaimable(key, _reclaimable_pods(env), at_s=time_s_of(env))
        case "admission_check":
            ac = env.admission_check
            return CheckUpdated(
                key,
                check=ac.check,
                state=ac.state,
                message=ac.message,
                requeue_after_s=max(0, ac.requeue_after_seconds),
                at_s=check_transitioned_s(env),
            )
        case "gang_rejected":
            return GangRejected(
                key, reason=env.gang_rejected.reason, message=env.gang_rejected.message
            )
        case "requests_refused":
            return RequestsRefused(key, message=env.requests_refused.message)
        case "placement_preempted":
            victims = tuple(WorkloadKey(v) for v in env.placement_preempted.victims)
            return PlacementPreempted(env.workload, victims)
        case "config_applied":
            return _apply_of(env)
        case "config_deleted":
            deleted = env.config_deleted
            return DeleteConfig(kind=deleted.kind, name=deleted.name, cluster=env.cluster)
        case "partition_changed":
            return _partition_record_of(env)
        case "pending" | "quota_reserved" | "admitted" | "evicted" | "requeued" | "routed":
            return _recorded_of(env, field)
        case _:
            return None


def _decode_one(manifest_json: str, *, what: str) -> ApiObject:
    try:
        return decode_manifest(manifest_json, what=what)
    except PayloadError as exc:
        raise FactError(str(exc)) from exc


def _submit_of(env: pb.Envelope, decoded: Workload | None = None) -> Submit:
    obj: ApiObject
    if decoded is not None and decoded.key == env.workload:
        obj = decoded
    else:
        obj = _decode_one(env.submitted.manifest_json, what=f"submitted {env.workload}")
    if not isinstance(obj, Workload):
        raise FactError(f"submitted {env.workload}: manifest is a {type(obj).__name__}")
    if obj.key != env.workload:
        # Every other service keys it by the envelope: taken under the manifest's name, it was
        # admitted as a workload no one else knew (a publisher's bug, or a forged event).
        raise FactError(f"submitted {env.workload}: manifest is the Workload {obj.key}")
    if env.submitted.queue_name and env.submitted.queue_name != obj.queue_name:
        # The gateway may pick the queue (dynamic queue selection): the envelope says which.
        obj = _replace_queue(obj, env.submitted.queue_name)
    return Submit(
        obj,
        cluster=env.cluster,
        generation=env.generation,
        at_s=time_s_of(env),
        manifest_json=env.submitted.manifest_json,
        partition=parse_token(env.partition),
        owner_manifest_json=env.submitted.owner_manifest_json,
        event_id=env.event_id,
    )


def _partition_record_of(env: pb.Envelope) -> PartitionRecord | None:
    changed = env.partition_changed
    if changed.partition >= PARTITIONS:
        raise FactError(f"config.partition: partition {changed.partition} is not in 0..15")
    match changed.WhichOneof("change"):
        case "shard":
            return PartitionRecord(changed.partition, env.sequence, shard=changed.shard)
        case "queue_left":
            left = changed.queue_left
            if left.to_partition >= PARTITIONS or "/" not in left.local_queue:
                raise FactError(f"config.partition: bad queue_left {left.local_queue!r}")
            carried = None
            if left.HasField("usage"):
                carried = (left.usage.at_s, tuple(sorted(left.usage.consumed.items())))
            return PartitionRecord(
                changed.partition,
                env.sequence,
                local_queue=left.local_queue,
                to_partition=left.to_partition,
                adopted=left.adopted,
                carried=carried,
            )
    return None


def _replace_queue(wl: Workload, queue_name: str) -> Workload:
    return msgspec.structs.replace(wl, queue_name=queue_name)


def _apply_of(env: pb.Envelope) -> ApplyConfig:
    applied = env.config_applied
    try:
        obj = applied_object(applied)
    except PayloadError as exc:
        raise FactError(str(exc)) from exc
    if isinstance(obj, Workload):
        raise FactError(f"{applied.kind}/{applied.name}: workloads are submitted, not applied")
    kind = "Configuration" if isinstance(obj, KueueConfig) else applied.kind
    return ApplyConfig(obj, kind=kind, name=applied.name, cluster=env.cluster)


def _recorded_of(env: pb.Envelope, field: str) -> Recorded:
    key = WorkloadKey(env.workload)
    at_s = time_s_of(env)
    reason = message = ""
    admission: Admission | None = None
    checks: tuple[str, ...] = ()
    queue_name = ""
    match field:
        case "pending":
            reason, message = env.pending.reason, env.pending.message
        case "quota_reserved":
            admission = admission_from_proto(env.quota_reserved.admission)
            checks = tuple(env.quota_reserved.admission_checks)
        case "admitted":  # it stands alone when stored before its quota_reserved (events.md)
            admission = admission_from_proto(env.admitted.admission)
        case "evicted":
            reason, message = env.evicted.reason, env.evicted.message
        case "requeued":
            reason, message = env.requeued.reason, env.requeued.message
        case "routed":
            reason, message = env.routed.reason, env.routed.message
            queue_name = env.routed.queue_name
    return Recorded(
        key,
        kind=field,
        source=env.source,
        at_s=at_s,
        event_id=env.event_id,
        submitted_id=env.submitted_id,
        reason=reason,
        message=message,
        admission=admission,
        checks=checks,
        queue_name=queue_name,
    )


# --- admissions -------------------------------------------------------------------------------


def admission_to_proto(admission: Admission) -> pb.Admission:
    return pb.Admission(
        cluster_queue=admission.cluster_queue,
        pod_set_assignments=[
            pb.PodSetAssignment(
                name=ps.name,
                flavors=dict(ps.flavors),
                count=ps.count,
                resource_usage=quantities_to_strings(ps.resource_usage),
            )
            for ps in admission.pod_set_assignments
        ],
    )


def admission_from_proto(admission: pb.Admission) -> Admission:
    """The model admission of a recorded quota_reserved; raises FactError on a bad quantity."""
    try:
        return Admission(
            cluster_queue=admission.cluster_queue,
            pod_set_assignments=tuple(
                PodSetAssignment(
                    name=ps.name,
                    flavors=dict(ps.flavors),
                    count=ps.count,
                    resource_usage={r: parse_quantity(q) for r, q in ps.resource_usage.items()},
                )
                for ps in admission.pod_set_assignments
            ),
        )
    except ValueError as exc:
        raise FactError(f"admission of {admission.cluster_queue}: {exc}") from exc


def placement_hints(
    admission: Admission, flavors: Mapping[str, ResourceFlavor], route: WorkloadRoute | None = None
) -> list[pb.PodSetPlacementHints]:
    """Per podset, the node labels and tolerations its assigned flavors put on its pods; for a
    workload routed to an alternative, also the requests and run time it has there."""
    away = route if route is not None and route.away else None
    routed = {ps.name: ps for ps in away.pod_sets} if away is not None else {}
    hints = []
    for ps in admission.pod_set_assignments:
        selector, tolerations = flavor_placement(ps.flavors.values(), flavors)
        hint = pb.PodSetPlacementHints(
            name=ps.name,
            node_selector=selector,
            tolerations=[
                pb.Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect)
                for t in tolerations
            ],
        )
        if away is not None and ps.name in routed:
            hint.requests.update(quantities_to_strings(routed[ps.name].requests))
            if away.run_s is not None:
                hint.annotations[RUN_SECONDS_ANNOTATION] = f"{away.run_s:g}"
        hints.append(hint)
    return hints


# --- decisions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decision:
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


def decisions_from(events: Sequence[Event], ctx: DecisionContext) -> list[Decision]:
    """The payloads to publish for `events`, in order; see the module docstring for the map.

    An Evicted immediately followed by a Deactivated of the same workload is one eviction with
    reason InactiveWorkload. Victims of one preemptor are listed in one preemption_requested,
    placed where its first victim was reported.
    """
    out: list[Decision] = []
    counts: dict[tuple[str, str], int] = {}
    preemptions: dict[str, pb.PreemptionRequested] = {}

    def add(field: str, payload: Message, e: Event, *, workload: str | None = None) -> None:
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
                    continue  # its `admitted` tells both, as Kueue's one status update does
                admission = ctx.admission_of(key)
                if admission is None:
                    continue  # nothing held any more: a later event of this batch says why
                payload = pb.QuotaReserved(
                    admission=admission_to_proto(admission),
                    admission_checks=list(ctx.checks_of(key)),
                )
                add("quota_reserved", payload, e)
            case EventType.ADMITTED:
                admission = ctx.admission_of(key)
                if admission is None:
                    continue
                manifests = ctx.manifests_of(key)
                admitted = pb.WorkloadAdmitted(
                    admission=admission_to_proto(admission),
                    hints=placement_hints(admission, ctx.flavors, ctx.route_of(key)),
                    manifest_json=_copied(manifests.workload_json),
                    owner_manifest_json=_copied(manifests.owner_json),
                    origin_cluster=manifests.origin_cluster,
                    with_reservation=i > 0 and _admitted_at_once(events, i - 1, ctx),
                )
                add("admitted", admitted, e)
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
