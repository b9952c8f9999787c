"""Every workload as the event stream tells it, for listing, describing and acting on. Pure.

`WorkloadBook.apply(envelope)`, called in stream order with MUSTER_EVENTS' workload and config
events, keeps one `Entry` per workload (a Kueue workload from its `submitted`, a gang outside
Kueue from its first event): its state in kueuectl's words (PENDING, QUOTARESERVED,
ADMITTED, FINISHED, and INACTIVE for a stopped one; WAITING and PERMITTED for gangs), its
conditions, its last events folded (`eventtext`), its route and where its pods are; and the
latest `config.applied` of every configuration object (what `muster stop localqueue` patches).
Nothing else is kept anywhere: the gateway's follower (`workloads.BookFollower`) rebuilds the
book from the stream at start, so any gateway answers the same.

Memory: live workloads, plus the finished ones of the last `finished_retention_s` (by the
events' own times, so every gateway forgets the same ones; at most FINISHED_KEPT of them), each
with its last EVENTS_KEPT event lines; a deleted one is dropped. A finished workload past its
retention is gone from the book as a Kueue Workload is gone past `objectRetentionPolicies.
workloads.afterFinished`: listing leaves it out, describing it is NOT_FOUND (`workloads.
one_named` says why), and its events stay in MUSTER_EVENTS for `muster events`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from muster.api.check_states import RESET_MESSAGE
from muster.api.names import dns1123_label_problem, dns1123_subdomain_problem
from muster.api.wellknown import LOCAL_CLUSTER
from muster.contracts.v1 import events_pb2, services_pb2
from muster.core.check_retries import retries_after_eviction
from muster.core.conditions import (
    ADMITTED_MESSAGE,
    DEACTIVATED,
    DEACTIVATED_MESSAGE,
    NOT_READY_MESSAGE,
    PENDING_EVALUATION,
    PENDING_EVALUATION_MESSAGE,
    READY_MESSAGE,
    RECOVERED,
    STARTED,
    STILL_STOPPED,
    WAIT_FOR_RECOVERY,
    WAIT_FOR_RECOVERY_MESSAGE,
    WAIT_FOR_START,
    Said,
    deactivated,
    deactivated_reason,
    finished_reason,
    is_deactivation,
    not_admitted,
    pods_gone,
    previously,
    quota_reserved_message,
    requeued_when_queued,
    restarted,
)
from muster.core.config_owners import ConfigOwners, config_key
from muster.gateway.eventtext import line_of, same_line
from muster.payloads import PayloadError, manifest_workload

FINISHED_KEPT: Final = 10_000
FINISHED_RETENTION_S: Final = 86_400.0  # a day: what ran overnight is still listed
EVENTS_KEPT: Final = 64

PENDING, RESERVED, ADMITTED, FINISHED = "PENDING", "QUOTARESERVED", "ADMITTED", "FINISHED"
INACTIVE, WAITING, PERMITTED = "INACTIVE", "WAITING", "PERMITTED"
STATUSES: Final = (PENDING, RESERVED, ADMITTED, FINISHED, INACTIVE, WAITING, PERMITTED)
DEACTIVATED_BY_ADMISSION: Final = "InactiveWorkload"  # admission/decisions.DEACTIVATED
CHECK_PREFIX: Final = "AdmissionCheck/"  # an admission check's condition: its state


# A packed entry's lines: kept in its `packed` (maxlen 0: shared, an append keeps nothing).
_PACKED_LINES: Final[deque[services_pb2.EventLine]] = deque(maxlen=0)


@dataclass(slots=True)
class Entry:
    """One workload: the summary `ListWorkloads` answers, and what `DescribeWorkload` adds."""

    summary: services_pb2.WorkloadSummary
    active: bool = True
    conditions: dict[str, services_pb2.WorkloadCondition] = field(default_factory=dict)
    lines: deque[services_pb2.EventLine] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    pods: dict[str, events_pb2.PodBinding] = field(default_factory=dict)
    # A whole permit's pods the binder creates on their nodes, until they are seen running:
    # a binder with `--bound-events binds` tells no `bound` for them (docs/events.md).
    to_create: tuple[events_pb2.PodBinding, ...] = ()
    admission: events_pb2.Admission | None = None
    route: events_pb2.WorkloadRouted | None = None
    pod_sets: tuple[events_pb2.PodSetSummary, ...] = ()
    evict_parts: dict[str, set[int]] = field(default_factory=dict)  # command id -> parts answered
    evict_stopped: set[str] = field(default_factory=set)  # of those, ones a part stopped pods of
    # A finished workload's description but its summary, serialized (`pack`); None: unpacked.
    packed: bytes | None = None

    @property
    def key(self) -> str:
        return self.summary.key

    @property
    def kueue(self) -> bool:
        """Admitted by Kueue's rules (it was submitted), not a gang placed on its own."""
        return bool(self.summary.local_queue)

    def say(self, conditions: Iterable[Said], at: int) -> None:
        for type_, status, reason, message in conditions:
            self.condition(type_, status, reason, message, at)

    def condition(self, type_: str, status: bool, reason: str, message: str, at: int) -> None:
        self.conditions[type_] = services_pb2.WorkloadCondition(
            type=type_,
            status="True" if status else "False",
            reason=reason,
            message=message,
            time_unix_nano=at,
        )

    def note(self, env: events_pb2.Envelope) -> None:
        """Add the event's line, folded into the last one when alike."""
        line = line_of(env)
        if self.lines and same_line(self.lines[-1], line):
            line.count = self.lines[-1].count + 1
            self.lines[-1] = line
        else:
            self.lines.append(line)

    def describe(self) -> services_pb2.WorkloadDescription:
        if self.packed is not None:
            description = services_pb2.WorkloadDescription.FromString(self.packed)
            description.summary.CopyFrom(self.summary)
            return description
        conditions: list[services_pb2.WorkloadCondition] = sorted(
            self.conditions.values(), key=lambda c: c.time_unix_nano
        )
        return services_pb2.WorkloadDescription(
            summary=self.summary,
            conditions=conditions,
            events=list(self.lines),
            pods=[self.pods[name] for name in sorted(self.pods)],
            admission=self.admission,
            route=self.route,
            pod_sets=list(self.pod_sets),
        )

    def pack(self) -> None:
        """Keep all but the summary as one serialized description: a finished workload is
        rarely described again, and each message kept (a condition, an event line, a pod,
        one read from an event, which holds that whole event) costs a protobuf arena of its
        own (docs/benchmarks.md, "soak": about 20 KB a finished workload, before)."""
        if self.packed is not None:
            return
        description = self.describe()
        description.ClearField("summary")
        self.packed = description.SerializeToString()
        self.conditions, self.pods, self.to_create = {}, {}, ()
        self.lines = _PACKED_LINES
        self.admission = None
        self.route = None
        self.pod_sets = ()

    def unpack(self) -> None:
        """What `pack` kept, back in the fields the events change."""
        if self.packed is None:
            return
        description = services_pb2.WorkloadDescription.FromString(self.packed)
        self.packed = None
        # In describe()'s order (by time), which a stable sort keeps on the next describe.
        self.conditions = {c.type: c for c in description.conditions}
        self.lines = deque(description.events, maxlen=EVENTS_KEPT)
        self.pods = {b.pod.name: b for b in description.pods}
        self.admission = description.admission if description.HasField("admission") else None
        self.route = description.route if description.HasField("route") else None
        self.pod_sets = tuple(description.pod_sets)


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


class WorkloadBook:
    """Workloads and configuration by key, as of stream sequence `sequence`."""

    def __init__(
        self,
        *,
        finished_kept: int = FINISHED_KEPT,
        finished_retention_s: float = FINISHED_RETENTION_S,
        manager: str = LOCAL_CLUSTER,
    ) -> None:
        if finished_retention_s < 0:
            raise ValueError(f"finished retention must be >= 0 s, got {finished_retention_s:g}")
        self.entries: dict[str, Entry] = {}
        # Finished keys with their `finished` time (ns), oldest first.
        self.finished: OrderedDict[str, int] = OrderedDict()
        self.finished_kept = finished_kept
        self.finished_retention_s = finished_retention_s
        # (kind, name) -> (cluster, manifest JSON) of the latest config.applied admission took:
        # its owner's, never a copy another cluster published (muster.core.config_owners); a
        # Namespace or LimitRange is each cluster's own, so its name is "<cluster>/<name>"
        # (`config_key`), as in admission's log
        self.configs: dict[tuple[str, str], tuple[str, str]] = {}
        self.config_owners = ConfigOwners(manager=manager)  # the gateway's own cluster
        self.sequence = 0

    def __len__(self) -> int:
        return len(self.entries)

    def apply(self, env: events_pb2.Envelope) -> None:
        """Learn what `env` says; call in stream order."""
        self.sequence = max(self.sequence, env.sequence)
        self._expire(env.time_unix_nano)
        payload = env.WhichOneof("payload")
        if payload == "config_applied":
            applied = env.config_applied
            if not self.config_owners.admit(applied.kind, applied.name, env.cluster):
                key = config_key(applied.kind, applied.name, env.cluster)
                self.configs[key] = (env.cluster, applied.manifest_json)
            return
        if payload == "config_deleted":
            deleted = env.config_deleted
            if not self.config_owners.admit(deleted.kind, deleted.name, env.cluster, deleted=True):
                self.configs.pop(config_key(deleted.kind, deleted.name, env.cluster), None)
            return
        if not env.workload or payload is None:
            return
        if payload == "submitted":
            self._submitted(env)
        elif payload == "deleted":
            self._forget(env.workload)
            return
        entry = self.entries.get(env.workload)
        if entry is None:
            if payload not in _GANG_OPENERS:
                return  # about a workload submitted before the stream's first event
            entry = self._gang(env)
        entry.unpack()  # an event after its end (rare): changed as it was
        handler = _HANDLERS.get(payload)
        if handler is not None:
            handler(self, entry, env)
        entry.note(env)
        if entry.summary.status == FINISHED and not entry.evict_parts:
            entry.pack()

    # --- lookups -------------------------------------------------------------------------

    def find(self, namespace: str, name: str) -> list[Entry]:
        """The workloads `name` names in `namespace` ("" = any): its key's name, its Job's (or
        other owner's) name, or a gang's source (`<name>/...` keys of the Workload API)."""
        return [e for e in self.entries.values() if _named(e, namespace, name)]

    def config(self, kind: str, name: str) -> tuple[str, str] | None:
        """(cluster, manifest JSON) of the latest `config.applied` of that object, if any."""
        return self.configs.get((kind, name))

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries.values())

    # --- events --------------------------------------------------------------------------

    def _submitted(self, env: events_pb2.Envelope) -> None:
        old = self.entries.get(env.workload)
        if old is not None and old.kueue:
            # Known, live or finished: admission takes this as a duplicate (a Submit sent
            # again, a watcher's resend) and so does the book; a deleted one was forgotten.
            return
        namespace, name = _split(env.workload)
        if not _admissible(env):
            # No Submit or watcher writes such a key or manifest (a forged event): admission
            # dead-letters it, and listed it was PENDING forever.
            return
        self._forget(env.workload)  # a gang's key, now a Kueue workload's
        s = env.submitted
        self.entries[env.workload] = Entry(
            summary=services_pb2.WorkloadSummary(
                namespace=namespace,
                name=name,
                key=env.workload,
                owner_kind=s.owner.kind,
                owner_name=s.owner.name,
                local_queue=s.queue_name or "default",
                status=PENDING,
                position_in_local_queue=-1,
                position_in_cluster_queue=-1,
                priority=s.priority,
                submitted_unix_nano=env.time_unix_nano,
                cluster=env.cluster,
            ),
            # Copied out in one message: a view would keep the whole event, manifest and all.
            pod_sets=tuple(events_pb2.WorkloadSubmitted(pod_sets=s.pod_sets).pod_sets),
        )

    def _gang(self, env: events_pb2.Envelope) -> Entry:
        namespace, name = _split(env.workload)
        entry = Entry(
            summary=services_pb2.WorkloadSummary(
                namespace=namespace,
                name=name,
                key=env.workload,
                status=WAITING,
                position_in_local_queue=-1,
                position_in_cluster_queue=-1,
                submitted_unix_nano=env.time_unix_nano,
                cluster=env.cluster,
            )
        )
        self.entries[env.workload] = entry
        return entry

    def _forget(self, key: str) -> None:
        self.entries.pop(key, None)
        self.finished.pop(key, None)

    def finish(self, key: str, at: int) -> None:
        """Count `key` among the finished since `at` (ns), forgetting the oldest past
        `finished_kept`."""
        self.finished[key] = at
        self.finished.move_to_end(key)
        while len(self.finished) > self.finished_kept:
            old, _ = self.finished.popitem(last=False)
            self.entries.pop(old, None)

    def _expire(self, now: int) -> None:
        """Forget the workloads finished more than `finished_retention_s` before `now`, an
        event's time: the book's clock is the stream's, so a rebuild forgets the same ones."""
        horizon = now - int(self.finished_retention_s * 1e9)
        while self.finished:
            key, at = next(iter(self.finished.items()))
            if at > horizon:
                return  # finished in stream order: the rest are newer (or as old)
            del self.finished[key]
            self.entries.pop(key, None)


def _admissible(env: events_pb2.Envelope) -> bool:
    """Whether admission takes `env`, a `submitted`, as a workload: its key is a workload's
    name (not "../x") and its manifest is one valid Workload of that key, as admission
    checks it (admission/fact_reader.py, which dead-letters the others)."""
    namespace, name = _split(env.workload)
    if dns1123_label_problem(namespace) or dns1123_subdomain_problem(name):
        return False
    try:
        workload = manifest_workload(env.submitted.manifest_json, what=env.workload)
    except PayloadError:
        return False
    return workload.key == env.workload


def _named(entry: Entry, namespace: str, name: str) -> bool:
    s = entry.summary
    if namespace and s.namespace != namespace:
        return False
    return name in (s.name, s.owner_name) or s.name.startswith(f"{name}/")


# --- what each event does to an entry ------------------------------------------------------

_Handler = Callable[[WorkloadBook, Entry, events_pb2.Envelope], None]
# A gang outside Kueue is known from the first event gang-permit or the watcher write about it.
_GANG_OPENERS: Final = frozenset({"pods_pending", "gang_waiting", "gang_permitted", "bound"})


def _pending(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    p = env.pending
    if e.summary.status != INACTIVE:
        e.summary.status = PENDING
    e.summary.reason, e.summary.message = p.reason, p.message
    if p.cluster_queue:
        e.summary.cluster_queue = p.cluster_queue
    e.condition("QuotaReserved", False, p.reason, p.message, env.time_unix_nano)
    e.say([not_admitted(reserved=False)], env.time_unix_nano)  # as the watcher writes it
    if p.reason not in STILL_STOPPED:
        _restarted(e, env.time_unix_nano)


def _quota_reserved(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    admission = env.quota_reserved.admission
    admitted = e.conditions.get("Admitted")
    if admitted is not None and admitted.status == "True" and not _evicting(e):
        return  # stored after its admitted (docs/events.md, "Order"), which said it
    _reserve(e, admission, env.time_unix_nano)
    e.summary.status = RESERVED
    if env.quota_reserved.admission_checks:  # Kueue: Admitted False till checks are Ready
        e.say([not_admitted(reserved=True)], env.time_unix_nano)


def _reserve(e: Entry, admission: events_pb2.Admission, at: int) -> None:
    """QuotaReserved True; an eviction in force becomes Evicted False (Kueue: "Previously")."""
    _restarted(e, at)  # reserved again: its queue runs
    message = quota_reserved_message(admission.cluster_queue)
    e.condition("QuotaReserved", True, "QuotaReserved", message, at)
    e.summary.cluster_queue = admission.cluster_queue
    e.summary.reason = e.summary.message = ""
    e.admission = admission
    evicted = e.conditions.get("Evicted")
    if evicted is not None and evicted.status == "True":
        e.condition("Evicted", False, "QuotaReserved", previously(evicted.message), at)


def _admitted(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    admission = env.admitted.admission
    reserved = e.conditions.get("QuotaReserved")
    if reserved is None or reserved.status != "True":
        # Admitted with its reservation (docs/events.md): it tells the QuotaReserved too.
        _reserve(e, admission, env.time_unix_nano)
    e.summary.status = ADMITTED
    e.summary.cluster_queue = admission.cluster_queue
    e.summary.admitted_unix_nano = env.time_unix_nano
    e.summary.cluster = env.cluster
    e.admission = admission
    e.condition("Admitted", True, "Admitted", ADMITTED_MESSAGE, env.time_unix_nano)


def _evicted(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    """Evicted True at once (Kueue's workload controller); QuotaReserved and Admitted stay as
    they were until its pods are gone (`_stopped`), except for a deactivation admission
    carried out at once (nothing ran, or it only reserved quota)."""
    ev = env.evicted
    at = env.time_unix_nano
    e.summary.evictions += 1
    e.summary.reason, e.summary.message = ev.reason, ev.message
    _reset_checks(e, at)
    if "PodsReady" in e.conditions:  # its pods start anew when admitted again (Kueue)
        e.condition("PodsReady", False, WAIT_FOR_START, NOT_READY_MESSAGE, at)
    if ev.reason == DEACTIVATED_BY_ADMISSION:
        was = e.conditions.get("Evicted")
        cause = was.reason if was is not None and was.status == "True" else ""
        e.condition("Evicted", True, deactivated_reason(cause), ev.message, at)
        _inactive(e, at)
        return
    e.condition("Evicted", True, ev.reason or "Evicted", ev.message, at)
    if is_deactivation(ev.reason):  # Kueue's DeactivatedDueTo<cause>: inactive
        e.active = False  # once its pods are gone (docs/events.md)


def _eviction_completed(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    done = env.eviction_completed
    if done.pods and (e.kueue or not _stopped_pods(e, done)):
        # A placement eviction's answer (pods outside Kueue): never a Kueue eviction's end;
        # in parts, the other parts' pods may still run; and one that stopped nothing (a
        # copy, its pods stopped before or still terminating) says nothing of the pods bound
        # now, which may be new ones.
        return
    e.pods.clear()
    e.to_create = ()
    del e.summary.nodes[:]
    if e.kueue and _evicting(e):
        _stopped(e, env.time_unix_nano)


def _stopped_pods(e: Entry, done: events_pb2.EvictionCompleted) -> bool:
    """Whether, with `done`, every part of its placement eviction is answered (docs/events.md,
    "Evictions answered part by part") and one of them stopped pods (`gone` short of `pods`;
    docs/events.md, "Repeated evictions answered as what they did")."""
    stopped = done.gone < done.pods
    if done.parts <= 1:
        return stopped
    answered = e.evict_parts.setdefault(done.command_id, set())
    answered.add(done.part)
    if stopped:
        e.evict_stopped.add(done.command_id)
    if len(answered) < done.parts:
        return False
    del e.evict_parts[done.command_id]
    if done.command_id not in e.evict_stopped:
        return False
    e.evict_stopped.discard(done.command_id)
    return True


def _evicting(e: Entry) -> bool:
    """Evicted and its reservation not yet cleared: its pods may still run."""
    evicted, reserved = e.conditions.get("Evicted"), e.conditions.get("QuotaReserved")
    return (
        evicted is not None
        and evicted.status == "True"
        and reserved is not None
        and reserved.status == "True"
    )


def _stopped(e: Entry, at: int) -> None:
    """Its pods are gone (Kueue's job reconciler): the reservation cleared, Requeued with the
    eviction's reason, True only when it queues again at once; a deactivated one stays out."""
    evicted = e.conditions["Evicted"]
    if is_deactivation(evicted.reason) or not e.active:
        _inactive(e, at)
        return
    e.summary.status = PENDING
    e.say(pods_gone(evicted.reason, evicted.message, granular=True), at)


def _inactive(e: Entry, at: int) -> None:
    """Deactivated, its quota given back (`core.conditions.deactivated`)."""
    evicted = e.conditions["Evicted"]
    e.active = False
    e.summary.status = INACTIVE
    e.say(deactivated(evicted.reason, evicted.message, granular=True), at)


def _requeued(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    """Queued again: QuotaReserved PendingEvaluation, and Requeued as Kueue's workload
    controller says why (back-off over, reactivated; a stopped queue's wait goes on)."""
    at = env.time_unix_nano
    if _evicting(e):
        _stopped(e, at)  # no eviction_completed came (nothing ran)
    e.summary.status = PENDING
    e.condition("QuotaReserved", False, PENDING_EVALUATION, PENDING_EVALUATION_MESSAGE, at)
    e.say([not_admitted(reserved=False)], at)
    was = e.conditions.get("Requeued")
    words = (
        None
        if was is None
        else requeued_when_queued(was.status, was.reason, was.message, env.requeued.reason)
    )
    if words is not None:
        e.condition("Requeued", True, *words, at)


def _restarted(e: Entry, at: int) -> None:
    """Requeued True once the stopped queue that evicted it runs again."""
    was = e.conditions.get("Requeued")
    words = None if was is None else restarted(was.status, was.reason)
    if words is not None:
        e.condition("Requeued", True, *words, at)


def _routed(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    e.route = env.routed
    e.summary.local_queue = env.routed.queue_name or e.summary.local_queue
    e.summary.cluster_queue = env.routed.to_cluster_queue


def _active_changed(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    e.active = env.active_changed.active
    if not e.active and e.summary.status == PENDING:
        # Kueue's workload controller evicts it too, though it holds nothing; the granular
        # reason (on by default since v0.19), as the engine writes it.
        at = env.time_unix_nano
        e.summary.status = INACTIVE
        evicted = e.conditions.get("Evicted")
        if evicted is None or evicted.status != "True":
            # Not evicted since its last reservation: this eviction resets its checks, a
            # Retry told while it waited counted, as admission counts it.
            _reset_checks(e, at)
            e.condition("Evicted", True, DEACTIVATED, DEACTIVATED_MESSAGE, at)
        e.condition("QuotaReserved", False, DEACTIVATED, DEACTIVATED_MESSAGE, at)
        e.say([not_admitted(reserved=False)], at)


def _bound(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    e.to_create = ()  # the binder told it: its `bound` names the pods
    _on_nodes(e, env.bound.bindings)


def _on_nodes(e: Entry, bindings: Iterable[events_pb2.PodBinding]) -> None:
    for binding in bindings:
        e.pods[binding.pod.name] = binding
    e.summary.nodes[:] = sorted({b.node for b in e.pods.values()})


def _gang_waiting(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    e.summary.reason, e.summary.message = env.gang_waiting.reason, ""
    if not e.kueue and e.summary.status != FINISHED:
        e.summary.status = WAITING


def _gang_permitted(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    permitted = env.gang_permitted
    if permitted.create and permitted.parts <= 1:  # answered by its pods, maybe not by `bound`
        e.to_create = tuple(permitted.bindings)
    if not e.kueue:
        e.summary.status = PERMITTED
        e.summary.admitted_unix_nano = env.time_unix_nano
        e.summary.reason = ""


def _gang_rejected(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    g = env.gang_rejected
    e.to_create = ()  # not made (BindFailed), or placed anew
    e.summary.reason, e.summary.message = g.reason, g.message


def _pods_ready(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    if env.WhichOneof("payload") == "pods_ready" and env.pods_ready.lost:
        why = WAIT_FOR_RECOVERY_MESSAGE
        e.condition("PodsReady", False, WAIT_FOR_RECOVERY, why, env.time_unix_nano)
        return
    was = e.conditions.get("PodsReady")
    recovering = was is not None and was.reason in (WAIT_FOR_RECOVERY, RECOVERED)
    reason = RECOVERED if recovering else STARTED  # as Kueue's job reconciler words it
    e.condition("PodsReady", True, reason, READY_MESSAGE, env.time_unix_nano)


def _running(book: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    if e.to_create:  # made where they were permitted, as they run (no `bound` told)
        _on_nodes(e, e.to_create)
        e.to_create = ()
    if env.running.pods_ready:  # ready as they started (docs/events.md, "Running and ready")
        _pods_ready(book, e, env)


def _finished(book: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    f = env.finished
    e.summary.status = FINISHED
    e.summary.succeeded = f.succeeded
    e.summary.finished_unix_nano = env.time_unix_nano
    reason = finished_reason(succeeded=f.succeeded, reason=f.reason)
    e.condition("Finished", True, reason, f.message or reason, env.time_unix_nano)
    if not f.succeeded:  # why it ended, in `muster workloads -o wide` and `describe`
        e.summary.reason, e.summary.message = reason, f.message
    book.finish(e.key, env.time_unix_nano)


def _admission_check(_: WorkloadBook, e: Entry, env: events_pb2.Envelope) -> None:
    ac = env.admission_check
    at = env.time_unix_nano
    type_ = f"{CHECK_PREFIX}{ac.check}"
    was = e.conditions.get(type_)
    e.condition(type_, ac.state == "Ready", ac.state, ac.message, at)
    if was is not None:  # an answer leaves the count as it is (Kueue)
        e.conditions[type_].retry_count = was.retry_count


def _reset_checks(e: Entry, at: int) -> None:
    """Kueue's resetChecksOnEviction, as its status shows it: every check told something but
    Pending is Pending again, a Retry counted (`core.check_retries`)."""
    told = {t: c for t, c in e.conditions.items() if t.startswith(CHECK_PREFIX)}
    counts = retries_after_eviction(
        {t: c.retry_count for t, c in told.items() if c.retry_count},
        {t: c.reason for t, c in told.items()},
    )
    for type_, c in told.items():
        if c.reason != "Pending":
            e.condition(type_, False, "Pending", f"{RESET_MESSAGE}{c.reason}", at)
            e.conditions[type_].retry_count = counts.get(type_, 0)


_HANDLERS: Final[dict[str, _Handler]] = {
    "pending": _pending,
    "quota_reserved": _quota_reserved,
    "admitted": _admitted,
    "evicted": _evicted,
    "eviction_completed": _eviction_completed,
    "requeued": _requeued,
    "routed": _routed,
    "active_changed": _active_changed,
    "bound": _bound,
    "gang_waiting": _gang_waiting,
    "gang_permitted": _gang_permitted,
    "gang_rejected": _gang_rejected,
    "pods_ready": _pods_ready,
    "running": _running,
    "finished": _finished,
    "admission_check": _admission_check,
}
