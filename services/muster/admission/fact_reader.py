"""Envelopes to admission's facts. Pure.

`fact_of(envelope)` reads what a consumed event means for admission (a `Fact`, `facts`), or None
when admission does not care; it raises `FactError` when the event cannot be read.
"""

from __future__ import annotations

import msgspec

from muster.admission.admission_proto import admission_from_proto
from muster.admission.facts import (
    ApplyConfig,
    CheckUpdated,
    Delete,
    DeleteConfig,
    Fact,
    FactError,
    Finish,
    GangRejected,
    PartitionRecord,
    PlacementPreempted,
    PodsReady,
    Recorded,
    RequestsRefused,
    SetActive,
    SetReclaimable,
    Stopped,
    Submit,
    Term,
)
from muster.api.model import (
    Admission,
    ApiObject,
    KueueConfig,
    ReclaimablePod,
    Workload,
    WorkloadKey,
)
from muster.bus.partitions import PARTITIONS, parse_token
from muster.contracts.v1 import events_pb2 as pb
from muster.payloads import (
    PayloadError,
    applied_object,
    check_transitioned_s,
    decode_manifest,
)


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
            return recorded_of(env, field)
        case _:
            return None


def _decode_one(manifest_json: str, *, what: str) -> ApiObject:
    try:
        return decode_manifest(manifest_json, what=what)
    except PayloadError as exc:
        raise FactError(str(exc)) from exc


def _submit_of(env: pb.Envelope, decoded: Workload | None = None) -> Submit:
    submitted = env.submitted
    text = submitted.manifest_json  # a new str at each read of the field: read once
    obj: ApiObject
    if decoded is not None and decoded.key == env.workload:
        obj = decoded
    else:
        obj = _decode_one(text, what=f"submitted {env.workload}")
    if not isinstance(obj, Workload):
        raise FactError(f"submitted {env.workload}: manifest is a {type(obj).__name__}")
    if obj.key != env.workload:
        # Every other service keys it by the envelope: taken under the manifest's name, it was
        # admitted as a workload no one else knew (a publisher's bug, or a forged event).
        raise FactError(f"submitted {env.workload}: manifest is the Workload {obj.key}")
    queue_name = submitted.queue_name
    if queue_name and queue_name != obj.queue_name:
        # The gateway may pick the queue (dynamic queue selection): the envelope says which.
        obj = _replace_queue(obj, queue_name)
    return Submit(
        obj,
        cluster=env.cluster,
        generation=env.generation,
        at_s=time_s_of(env),
        manifest_json=text,
        partition=parse_token(env.partition),
        owner_manifest_json=submitted.owner_manifest_json,
        event_id=env.event_id,
    )


def _partition_record_of(env: pb.Envelope) -> PartitionRecord:
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
        case "taken_over":
            taken = changed.taken_over
            term = Term(taken.shard, taken.term, taken.owner)
            return PartitionRecord(changed.partition, env.sequence, takeover=term)
    # A kind of record this version does not know still fences the partition: decisions fenced
    # on an older record are refused, and a replica that did not count it would rebuild forever.
    return PartitionRecord(changed.partition, env.sequence)


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


def recorded_of(env: pb.Envelope, field: str, *, built: Admission | None = None) -> Recorded:
    """The decision `env` (its payload `field`, one of `RECORDED`) as history.

    `built`: the admission a quota_reserved's or admitted's payload was made from, when the
    caller made it (`decision_reads.own_records`); else it is parsed from the payload."""
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
            admission = _admission(env.quota_reserved.admission, built)
            checks = tuple(env.quota_reserved.admission_checks)
        case "admitted":  # it stands alone when stored before its quota_reserved (events.md)
            admission = _admission(env.admitted.admission, built)
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


def _admission(stored: pb.Admission, built: Admission | None) -> Admission:
    return built if built is not None else admission_from_proto(stored)
