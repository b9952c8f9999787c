"""One readable line per event, and the folding of repeated ones. Pure.

Used by `muster events`, `muster describe workload` (through the gateway's workload book) and
the dashboard, so that every place shows an event the same way: what a person scanning a list
needs (the reason, the queue, the nodes), never a payload dumped as JSON. Pod lists are cut
to a few names: a gang of 1 000 pods is one short line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from muster.contracts.v1 import events_pb2, services_pb2
from muster.core.conditions import FAILED_TO_START, finished_reason

NAMES_SHOWN: Final = 3  # pod or node names in one line, then "+N more"
LONGEST: Final = 240  # characters of a detail; longer ones end with "…"
# Events that repeat with a changing count while nothing happens (the watcher's pending pods):
# consecutive ones fold into one line whatever their detail says, showing the latest.
FOLDED_BY_TYPE: Final = frozenset({"workload.pods_pending", "workload.gang_waiting"})


def names(items: Iterable[str], *, shown: int = NAMES_SHOWN) -> str:
    """ "a, b, c +2 more": the first `shown` of `items` (sorted, unique), then how many more."""
    unique = sorted(set(items))
    head = ", ".join(unique[:shown])
    return head + (f" +{len(unique) - shown} more" if len(unique) > shown else "")


def detail(env: events_pb2.Envelope) -> str:
    """A one-line summary of `env`'s payload, at most LONGEST characters."""
    field = env.WhichOneof("payload")
    if field is None:
        return ""
    known = _FORMATS.get(field)
    if known is not None:
        return _cut(known(env))
    compact = json_format.MessageToDict(getattr(env, field))
    return _cut(json.dumps(compact, separators=(",", ":")) if compact else "")


def _plural(count: int, what: str) -> str:
    return f"{count} {what}{'s' if count != 1 else ''}"


def _submitted(env: events_pb2.Envelope) -> str:
    s = env.submitted
    owner = f" from {s.owner.kind} {s.owner.name}" if s.owner.name else ""
    return f"to LocalQueue {s.queue_name or 'default'}, priority {s.priority}{owner}"


def _reason(env: events_pb2.Envelope) -> str:
    field = env.WhichOneof("payload")
    payload = getattr(env, field or "")
    text = f"{payload.reason}: {payload.message}".strip(": ")
    if field == "evicted" and env.evicted.preemptor:
        text += f" (by {env.evicted.preemptor})"
    return text


def _admission(env: events_pb2.Envelope) -> str:
    field = env.WhichOneof("payload") or ""
    admission = getattr(env, field).admission
    flavors = sorted(
        {f"{r}={f}" for ps in admission.pod_set_assignments for r, f in ps.flavors.items()}
    )
    where = f" in cluster {env.cluster}" if field == "admitted" else ""
    line = f"ClusterQueue {admission.cluster_queue}{where}: {' '.join(flavors)}".rstrip(": ")
    # Admitted with its reservation: the one line tells the QuotaReserved a `quota_reserved`
    # told before (docs/events.md).
    return f"quota reserved and admitted: {line}" if env.admitted.with_reservation else line


def _routed(env: events_pb2.Envelope) -> str:
    r = env.routed
    where = f"{r.from_cluster_queue} → {r.to_cluster_queue} (LocalQueue {r.queue_name})"
    return f"{where} {r.policy or r.reason}: {r.message}"  # RequestsRefused: no policy


def _finished(env: events_pb2.Envelope) -> str:
    f = env.finished
    ok = "succeeded" if f.succeeded else "failed"
    if finished_reason(succeeded=f.succeeded, reason=f.reason) == FAILED_TO_START:
        ok = "failed to start:"
    return f"{ok} {f.message}".rstrip()


def _pods_pending(env: events_pb2.Envelope) -> str:
    pods = env.pods_pending.pods
    count = max(env.pods_pending.count, len(pods))  # the list stops at half the event limit
    return f"{_plural(count, 'pod')} pending: {names(p.name for p in pods)}"


def _gang_waiting(env: events_pb2.Envelope) -> str:
    g = env.gang_waiting
    return f"{g.reason} ({g.pending} of {g.min_count} pods pending)"


def _bindings(env: events_pb2.Envelope) -> str:
    field = env.WhichOneof("payload") or ""
    bindings = getattr(env, field).bindings
    return f"{_plural(len(bindings), 'pod')} on {names(b.node for b in bindings)}"


def _placement_preempted(env: events_pb2.Envelope) -> str:
    p = env.placement_preempted
    count = max(p.pod_count, len(p.pods))  # pods are listed only when they fit the event
    return f"preempts {names(p.victims)} ({_plural(count, 'pod')})"


def _eviction_completed(env: events_pb2.Envelope) -> str:
    done = env.eviction_completed
    if not done.pods:  # a Kueue eviction's end: all its pods
        return "pods stopped"
    stopped = done.pods - done.gone  # a copy or re-send finds the pods gone already
    if not stopped:
        text = f"nothing stopped: {_plural(done.pods, 'pod')} gone already"
    elif done.gone:
        text = f"{_plural(stopped, 'pod')} stopped, {done.gone} gone already"
    else:
        text = f"{_plural(stopped, 'pod')} stopped"
    return f"{text} (part {done.part + 1} of {done.parts})" if done.parts > 1 else text


def _preemption_requested(env: events_pb2.Envelope) -> str:
    victims = env.preemption_requested.victims
    if not victims:
        return ""
    return f"preempts {names(v.workload for v in victims)}: {victims[0].reason}"


def _admission_check(env: events_pb2.Envelope) -> str:
    ac = env.admission_check
    return f"check {ac.check}: {ac.state} {ac.message}".rstrip()


def _active_changed(env: events_pb2.Envelope) -> str:
    changed = env.active_changed
    who = f" by {changed.submitter.user}" if changed.submitter.user else ""
    verb = "resumed" if changed.active else "stopped"
    return f"{verb}{who} (spec.active={'true' if changed.active else 'false'})"


def _copy_status(env: events_pb2.Envelope) -> str:
    """A MultiKueue copy's Job or JobSet status as `kubectl get` tells it: its counts, and its
    end condition once there (a Job's Complete, a JobSet's Completed, or Failed: no kind has
    another's, so one list serves both)."""
    try:
        status = json.loads(env.copy_status.status_json)
    except ValueError:
        return "copy's status unreadable"
    if not isinstance(status, dict):
        return "copy's status unreadable"
    counts = ", ".join(
        f"{status[k]} {k}" for k in ("active", "ready", "succeeded", "failed") if status.get(k)
    )
    conditions = status.get("conditions")
    ended = [
        str(c.get("type"))
        for c in (conditions if isinstance(conditions, list) else ())
        if isinstance(c, dict)
        and c.get("type") in ("Complete", "Completed", "Failed")
        and c.get("status") == "True"
    ]
    return "copy: " + ", ".join([*ended, counts or "no pods"])


def _reclaimable_pods(env: events_pb2.Envelope) -> str:
    pods = env.reclaimable_pods.pods
    if not pods:
        return "no pods reclaimable"
    each = ", ".join(f"{_plural(p.count, 'pod')} of {p.pod_set}" for p in pods)
    return f"{each} reclaimable (finished: their quota is freed)"


def _config(env: events_pb2.Envelope) -> str:
    field = env.WhichOneof("payload") or ""
    payload = getattr(env, field)
    return f"{payload.kind}/{payload.name}"


def _queue_status(env: events_pb2.Envelope) -> str:
    cq = env.queue_status.cluster_queue
    return (
        f"ClusterQueue/{cq.name}: {cq.pending_workloads} pending, "
        f"{cq.reserving_workloads} reserving, {cq.admitted_workloads} admitted"
    )


def _forwarded(env: events_pb2.Envelope) -> str:
    """What was forwarded and why, not the stored envelope's bytes in base64."""
    f = env.forwarded
    try:
        inner = events_pb2.Envelope.FromString(f.envelope).type or "an event"
    except DecodeError:
        inner = "an undecodable event"
    why = "its history" if f.story else "a report naming the old partition"
    return (
        f"{inner} #{f.sequence} forwarded from partition {f.from_partition} "
        f"({why}; LocalQueue {f.local_queue or '-'} moved)"
    )


_FORMATS: Final[dict[str, Callable[[events_pb2.Envelope], str]]] = {
    "submitted": _submitted,
    "pending": _reason,
    "evicted": _reason,
    "requeued": _reason,
    "gang_rejected": _reason,
    "quota_reserved": _admission,
    "admitted": _admission,
    "routed": _routed,
    "finished": _finished,
    "pods_pending": _pods_pending,
    "gang_waiting": _gang_waiting,
    "gang_permitted": _bindings,
    "bound": _bindings,
    "placement_preempted": _placement_preempted,
    "preemption_requested": _preemption_requested,
    "admission_check": _admission_check,
    "active_changed": _active_changed,
    "copy_status": _copy_status,
    "reclaimable_pods": _reclaimable_pods,
    "requests_refused": lambda env: f"requests refused: {env.requests_refused.message}",
    "eviction_completed": _eviction_completed,
    "eviction_dropped": lambda _: "a late eviction of an earlier workload of this name: dropped",
    "running": lambda env: "pods running and ready" if env.running.pods_ready else "pods running",
    "pods_ready": lambda env: "a pod lost readiness" if env.pods_ready.lost else "all pods ready",
    "deleted": lambda _: "deleted",
    "config_applied": _config,
    "config_deleted": _config,
    "queue_status": _queue_status,
    "forwarded": _forwarded,
}


def _cut(text: str) -> str:
    return text if len(text) <= LONGEST else text[: LONGEST - 1] + "…"


def same_line(a: services_pb2.EventLine, b: services_pb2.EventLine) -> bool:
    """Whether `b`, right after `a`, folds into it: the same type and detail, or a type that
    only repeats a changing count (FOLDED_BY_TYPE)."""
    return a.type == b.type and (a.detail == b.detail or a.type in FOLDED_BY_TYPE)


def line_of(env: events_pb2.Envelope) -> services_pb2.EventLine:
    return services_pb2.EventLine(
        sequence=env.sequence,
        time_unix_nano=env.time_unix_nano,
        type=env.type,
        detail=detail(env),
        count=1,
    )


def fold(lines: Iterable[services_pb2.EventLine]) -> list[services_pb2.EventLine]:
    """`lines` with each run of alike ones (`same_line`) as one: the last of the run, whose
    `count` says how many it stands for."""
    out: list[services_pb2.EventLine] = []
    for line in lines:
        if out and same_line(out[-1], line):
            merged = services_pb2.EventLine()
            merged.CopyFrom(line)
            merged.count = out[-1].count + max(line.count, 1)
            out[-1] = merged
        else:
            out.append(line)
    return out
