"""kueuectl's stop, resume and delete as events: what each call publishes. Pure.

- A Workload: `workload.active_changed` (spec.active false or true), which admission acts on
  (docs/events.md); delete publishes active_changed false (so its pods are stopped as an
  eviction stops them) and then `workload.deleted`.
- A LocalQueue or ClusterQueue: a `config.applied` of the object as last applied, with
  `spec.stopPolicy` set (HoldAndDrain, Hold with keep_already_running, None to resume), on
  the cluster it was applied on. Admission reads it as any change of the object.

Nothing is published when the object already is as asked. Event ids come from the call's
idempotency key (a retried call publishes the same ids, deduplicated) or are fresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import Message

from muster.api.quantity import shown
from muster.bus.envelope import new_event
from muster.contracts.v1 import events_pb2, services_pb2
from muster.gateway.book import FINISHED, INACTIVE, Entry
from muster.gateway.permissions import Action, Caller, Permission
from muster.gateway.request_names import (
    NAMESPACE,
    OBJECT_NAME,
    Check,
    check_names,
    workload_name,
)
from muster.gateway.visibility import InvalidQueryError
from muster.payloads import config_applied, manifest_document

WORKLOAD, LOCAL_QUEUE, CLUSTER_QUEUE = "Workload", "LocalQueue", "ClusterQueue"
KINDS: Final = {
    **dict.fromkeys(("workload", "workloads", "wl"), WORKLOAD),
    **dict.fromkeys(("localqueue", "localqueues", "lq"), LOCAL_QUEUE),
    **dict.fromkeys(("clusterqueue", "clusterqueues", "cq"), CLUSTER_QUEUE),
}
HOLD, HOLD_AND_DRAIN, NONE = "Hold", "HoldAndDrain", "None"
STOP, RESUME, DELETE = "stop", "resume", "delete"


def kind_of(kind: str) -> str:
    """Workload, LocalQueue or ClusterQueue for any of kueuectl's spellings; InvalidQueryError."""
    found = KINDS.get(kind.lower())
    if found is None:
        raise InvalidQueryError(
            f"object.kind: must be workload, localqueue or clusterqueue, got {shown(kind)}"
        )
    return found


def check_ref(kind: str, ref: services_pb2.ObjectRef) -> None:
    """InvalidQueryError naming the field when `ref` (an ObjectRef) cannot name a `kind`: a
    namespace that is not a DNS-1123 label, a name with a part that is not a DNS-1123
    subdomain. A workload's name may be a gang's, "<namespace>/<gang>" (three parts at most)."""
    if not ref.name:
        raise InvalidQueryError("object.name: is required")
    name: list[Check] = [("object.name", ref.name, OBJECT_NAME)]
    if kind == WORKLOAD:
        name = workload_name("object.name", ref.name)
    check_names([("object.namespace", ref.namespace, NAMESPACE), *name])


@dataclass(frozen=True)
class Plan:
    """What a control call publishes (nothing when already so) and says."""

    key: str
    events: tuple[events_pb2.Envelope, ...]
    message: str


def _envelopes(
    payloads: Sequence[tuple[str, Message]],
    *,
    key: str,
    cluster: str,
    workload: str,
    verb: str,
    idempotency_key: str,
) -> tuple[events_pb2.Envelope, ...]:
    cause = None
    if idempotency_key:  # derived ids: a retry of this call publishes the same ones
        cause = events_pb2.Envelope(event_id=f"gateway/{verb}/{key}/{idempotency_key}")
    return tuple(
        new_event(
            field,
            payload,
            cluster=cluster,
            workload=workload,
            cause=cause,
            source="gateway",
            n=n,
        )
        for n, (field, payload) in enumerate(payloads)
    )


def workload_action(entry: Entry) -> Action:
    """Stopping, resuming or deleting a workload: `cancel` in its namespace and LocalQueue."""
    s = entry.summary
    return Action(
        permission=Permission.CANCEL,
        namespace=s.namespace,
        local_queue=s.local_queue,
        kind=WORKLOAD,
        name=entry.key,
    )


def plan_workload(entry: Entry, verb: str, caller: Caller, *, idempotency_key: str) -> Plan:
    """The events that stop, resume or delete `entry` (a Kueue workload)."""
    status = entry.summary.status
    if verb == RESUME:
        if entry.active and status != INACTIVE:
            return Plan(entry.key, (), "already active")
        payloads: list[tuple[str, Message]] = [("active_changed", _active(True, caller))]
        message = "resumed"
    elif status == FINISHED and verb == STOP:
        return Plan(entry.key, (), "already finished: nothing to stop")
    elif verb == STOP:
        if not entry.active:
            return Plan(entry.key, (), "already stopped")
        payloads, message = [("active_changed", _active(False, caller))], "stopped"
    else:
        payloads = []
        if entry.active and status != FINISHED:
            payloads.append(("active_changed", _active(False, caller)))
        payloads.append(("deleted", events_pb2.WorkloadDeleted()))
        message = "deleted"
    events = _envelopes(
        payloads,
        key=entry.key,
        cluster=entry.summary.cluster,
        workload=entry.key,
        verb=verb,
        idempotency_key=idempotency_key,
    )
    return Plan(entry.key, events, message)


def _active(active: bool, caller: Caller) -> events_pb2.WorkloadActiveChanged:
    return events_pb2.WorkloadActiveChanged(active=active, submitter=caller.submitter())


def queue_action(kind: str, key: str) -> Action:
    """Changing a queue needs what applying it needs: create_queue in a LocalQueue's namespace,
    admin for a ClusterQueue (cluster-scoped)."""
    if kind == LOCAL_QUEUE:
        namespace = key.split("/", 1)[0]
        return Action(permission=Permission.CREATE_QUEUE, namespace=namespace, kind=kind, name=key)
    return Action(permission=Permission.ADMIN, kind=kind, name=key)


def plan_queue(
    kind: str,
    key: str,
    applied: tuple[str, str],
    *,
    policy: str,
    caller: Caller,
    verb: str,
    idempotency_key: str,
) -> Plan:
    """The `config.applied` setting the queue's stopPolicy to `policy`; `applied` is the
    (cluster, manifest JSON) it was last applied with. PayloadError (a ValueError) when that
    manifest is not a JSON object."""
    cluster, manifest_json = applied
    doc = manifest_document(manifest_json, what=f"{kind}/{key}")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        spec = doc["spec"] = {}
    if spec.get("stopPolicy", NONE) == policy:
        return Plan(key, (), f"stopPolicy already {policy}")
    if policy == NONE:
        spec.pop("stopPolicy", None)
    else:
        spec["stopPolicy"] = policy
    payload = config_applied(kind, key, doc, submitter=caller.submitter())
    events = _envelopes(
        [("config_applied", payload)],
        key=f"{kind}/{key}",
        cluster=cluster,
        workload="",
        verb=verb,
        idempotency_key=idempotency_key,
    )
    word = "resumed" if policy == NONE else f"stopped ({policy})"
    return Plan(key, events, word)
