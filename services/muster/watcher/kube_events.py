"""The Kubernetes Events muster records (`muster.cluster.kube.events`), folded from its own
events: what `kubectl describe workload`, `kubectl describe job`, `kubectl describe pod` and
`kubectl get events` show. Pure (the pods of a gang come from the watcher's view, `pods_of`).

| muster event | recorded on | reason (type) | note |
|---|---|---|---|
| pending | the Workload and its Job | Pending or Inadmissible (Warning) | why it waits |
| quota_reserved | the Workload and its Job | QuotaReserved | ... wait time since queued was Ns |
| admitted | the Workload and its Job | Admitted (below) | ... wait time since reservation was Ns |
| evicted | the Workload and its Job | Preempted (if so), EvictedDueTo<reason> | why |
| requeued | the Workload and its Job | Requeued | why |
| routed | the Workload and its Job | Routed | where to and why |
| finished | the Workload and its Job | Finished (Warning when it failed) | how it ended |
| admission_check | the Workload and its Job | MultiKueue (Warning: not Ready) | where it went |
| gang_waiting | each pending pod of the gang | FailedScheduling (Warning) | the gang's reason |
| bound | each pod bound | Scheduled | Successfully assigned ns/pod to node |
| (refused) | that object | ErrWorkloadCompose (Job, Pod), else Invalid (Warning) | why, once |

Workload Events are reported by `muster.dev/admission`, pod Events by the scheduler (muster).
Repeats of one Event become a series in the recorder, so a workload waiting round after round
for the same reason makes one Event with a count; a refusal is told once per generation and
problems (`cluster.refusals`). An `admitted` stored before its
`quota_reserved` (docs/events.md, "Order of admission's decisions") tells both in Kueue's order;
the late `quota_reserved` then tells nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from muster.cluster.kube.references import Reference
from muster.contracts.v1 import events_pb2 as pb
from muster.core.conditions import deactivated_reason
from muster.watcher.kueue_status.followed import DEACTIVATED_BY_ADMISSION, WORKLOAD_EVENTS
from muster.watcher.pods import PENDING, PodState

ADMISSION = "muster.dev/admission"  # reportingController of workload Events
# The muster events whose Kubernetes Events are recorded (their subjects are followed): a
# workload's as its status follows them, and its routing and its pods' placement.
EVENT_SOURCES = (*WORKLOAD_EVENTS, "routed", "gang_waiting", "bound", "admission_check")
_ADMISSION_SOURCE = "admission/"  # Envelope.source of admission's own answers (MultiKueue)


class EventSpec(NamedTuple):
    """One Kubernetes Event to record."""

    regarding: Reference
    type: str
    reason: str
    action: str
    note: str
    controller: str


class _Known:
    __slots__ = ("admitted", "evicted", "job", "queued_s", "reserved", "reserved_s")

    def __init__(self, job: Reference | None, at_s: float) -> None:
        self.job = job  # the Job it stands for, if any
        self.queued_s = at_s  # since when it waits (submitted, or requeued)
        self.reserved_s = at_s
        # Of its admission since it was last queued: an `admitted` may be stored before its
        # `quota_reserved` (docs/events.md, "Order of admission's decisions").
        self.reserved = False
        self.admitted = False
        self.evicted = ""  # the reason of its last eviction since it was last queued

    def queued(self, at_s: float) -> None:
        self.queued_s = at_s
        self.reserved = self.admitted = False
        self.evicted = ""


class EventBook:
    """Which Events muster's events make; `apply` them in stream order."""

    def __init__(
        self,
        *,
        kueue_version: str = "v1beta1",
        scheduler: str = "muster",
        pods_of: Callable[[str], Sequence[PodState]] = lambda _: (),
    ) -> None:
        self._api_version = f"kueue.x-k8s.io/{kueue_version}"
        self._scheduler = scheduler
        self._pods_of = pods_of
        self._known: dict[str, _Known] = {}

    def apply(self, env: pb.Envelope) -> list[EventSpec]:
        """The Events `env` makes (none for what this cluster does not know)."""
        field = env.WhichOneof("payload")
        at_s = env.time_unix_nano / 1e9
        if field == "gang_waiting":
            return self._waiting(env.workload, env.gang_waiting.reason)
        if field == "bound":
            return self._bound(env.bound)
        if field == "submitted":
            owner = env.submitted.owner
            job = (
                Reference(
                    api_version=owner.api_version, kind=owner.kind,
                    namespace=_namespace(env.workload), name=owner.name, uid=owner.uid,
                )
                if owner.kind in ("Job", "JobSet")  # Kueue's job reconciler tells them too
                else None
            )  # fmt: skip
            self._known.setdefault(env.workload, _Known(job, at_s))
            return []
        known = self._known.get(env.workload)
        if known is None:
            return []
        if field == "admission_check" and not env.source.startswith(_ADMISSION_SOURCE):
            return []  # a check controller's answer: it records its own Events
        if field == "deleted":
            del self._known[env.workload]
            return []
        return [
            spec
            for type_, reason, note in self._story(known, field, getattr(env, field), at_s)
            for spec in self._about(env.workload, known, type_, reason, note)
        ]

    def _story(
        self, known: _Known, field: str | None, payload: Any, at_s: float
    ) -> list[tuple[str, str, str]]:
        """(type, reason, note) of each Event one workload event makes."""
        if field == "pending":
            reason = "Inadmissible" if payload.reason == "Inadmissible" else "Pending"
            return [("Warning", reason, payload.message)]
        if field == "quota_reserved":
            return [] if known.admitted else [_reserved(known, payload, at_s)]
        if field == "admitted":
            # Stored before its reservation: the Events tell both, in Kueue's order.
            told = [] if known.reserved else [_reserved(known, payload, at_s)]
            known.admitted = True
            wait = at_s - known.reserved_s
            cq = payload.admission.cluster_queue
            note = f"Admitted by ClusterQueue {cq}, wait time since reservation was {wait:.0f}s"
            return [*told, ("Normal", "Admitted", note)]
        if field == "evicted":
            known.reserved = known.admitted = False
            cause = payload.reason
            if cause == DEACTIVATED_BY_ADMISSION:  # Kueue's words, with the deactivation's cause
                cause = deactivated_reason(known.evicted)
            known.evicted = cause
            found = [("Normal", f"EvictedDueTo{cause or 'Eviction'}", payload.message)]
            if payload.reason == "Preempted":
                found.insert(0, ("Normal", "Preempted", payload.message))
            return found
        if field == "requeued":
            known.queued(at_s)
            return [("Normal", "Requeued", payload.message or "Requeued")]
        if field == "routed":
            return [("Normal", "Routed", payload.message)]
        if field == "finished":
            type_ = "Normal" if payload.succeeded else "Warning"
            return [(type_, "Finished", payload.message)]
        if field == "admission_check":  # MultiKueue's dispatch, as admission answers it
            type_ = "Normal" if payload.state == "Ready" else "Warning"
            return [(type_, "MultiKueue", payload.message)]
        return []

    def _about(
        self, key: str, known: _Known, type_: str, reason: str, note: str
    ) -> list[EventSpec]:
        """The Event on the Workload, and the same on its Job."""
        namespace, _, name = key.partition("/")
        workload = Reference(
            api_version=self._api_version, kind="Workload", namespace=namespace, name=name
        )
        targets = [workload] if known.job is None else [workload, known.job]
        return [EventSpec(t, type_, reason, reason, note, ADMISSION) for t in targets]

    def _waiting(self, gang: str, reason: str) -> list[EventSpec]:
        pods = sorted(self._pods_of(gang), key=lambda p: p.key)
        return [
            EventSpec(
                Reference(
                    api_version="v1", kind="Pod", namespace=p.namespace, name=p.name, uid=p.uid
                ),
                "Warning",
                "FailedScheduling",
                "Scheduling",
                reason,
                self._scheduler,
            )
            for p in pods
            if p.phase == PENDING and not p.node
        ]

    def _bound(self, bound: pb.PodsBound) -> list[EventSpec]:
        found = []
        for b in bound.bindings:
            namespace, name = b.pod.namespace, b.pod.name
            pod = Reference(
                api_version="v1", kind="Pod", namespace=namespace, name=name, uid=b.pod.uid
            )
            note = f"Successfully assigned {namespace}/{name} to {b.node}"
            found.append(EventSpec(pod, "Normal", "Scheduled", "Binding", note, self._scheduler))
        return found


def _reserved(known: _Known, payload: Any, at_s: float) -> tuple[str, str, str]:
    """The QuotaReserved Event of a `quota_reserved` or of an `admitted` stored before it."""
    known.reserved, known.reserved_s = True, at_s
    wait = at_s - known.queued_s
    cq = payload.admission.cluster_queue
    return (
        "Normal",
        "QuotaReserved",
        f"Quota reserved in ClusterQueue {cq}, wait time since queued was {wait:.0f}s",
    )


def _namespace(key: str) -> str:
    return key.partition("/")[0]
