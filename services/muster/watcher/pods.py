"""A workload's pods, seen together: which of pods_pending, running, pods_ready and finished hold.

Level-triggered: `due_events` looks at the pods as they are now and at what was already sent
(`Sent`), never at the change that led here, so a watcher that missed intermediate states (a
restart, a resumed watch) still publishes each fact exactly once per set of pods. Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from muster.api.wellknown import PARTITION_ANNOTATION, TRACEPARENT_ANNOTATION
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES
from muster.cluster.objects import (
    POD_SET_ANNOTATION,
    PodView,
    admission_of,
    is_ready,
    report_key,
)
from muster.contracts.v1 import events_pb2
from muster.watcher.translate import Outgoing

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
# The events `due_events` makes: the watcher reads its own back at start (`Sent.recall`).
POD_EVENTS = ("pods_pending", "running", "pods_ready", "finished")
# At most this many pod uids in one event (~38 bytes each: 380 KB, well within the bus's 1 MiB
# limit with the rest of the envelope): `told_uids`.
MAX_TOLD_UIDS = 10_000
# A pending set is told at once when its count reached this many times the last one told, or
# fell to 1/this of it (`pending_news`); other changes wait for `watcher.deferred`.
PENDING_STEP = 2


class PodState(msgspec.Struct, frozen=True, kw_only=True):
    """What the watcher needs of one pod labelled with its workload."""

    namespace: str
    name: str
    uid: str
    workload: str  # "<namespace>/<workload name>"
    pod_set: str = ""
    node: str = ""
    phase: str = PENDING
    # Its Ready condition is True (the kubelet's readiness probes passed; with no probe, once
    # its containers run). Kueue takes readiness from it, not from the phase.
    ready: bool = False
    message: str = ""
    # Controlled by a batch Job: the Job's conditions say when it is over (`job_finished`).
    of_job: bool = False
    traceparent: str = ""  # its workload's trace, when muster started it (binder)
    partition: str = ""  # its workload's admission partition, when muster started it (binder)
    # The Kueue admission muster's binder started it for (label muster.dev/admission; 0: none).
    admission: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Sent(msgspec.Struct, kw_only=True):
    """What was published for one workload's pods: per event, the pod uids it covered.

    pods_pending is keyed by the exact set of pending pods; the others by every pod they
    covered, so a pod that was part of a `finished` never makes another one.
    """

    submitted: str = ""  # `translate.incarnation` of the last workload.submitted
    reclaimable: str = ""  # `translate.reclaimable_mark` last told (submitted or reclaimable_pods)
    pending: list[str] = msgspec.field(default_factory=list)  # digests of pending sets sent
    # How many pods the last pods_pending told pending (`pending_news`; 0: none told). Marks of
    # before have none: the next set is then told at once, as it was then.
    pending_count: int = 0
    running: list[str] = msgspec.field(default_factory=list)  # pod uids
    # uids of pods whose `running` said not ready: a `pods_ready` is due once they are (kept
    # apart from `running`, so the common case, ready as they start, stores nothing more).
    unready: list[str] = msgspec.field(default_factory=list)
    pods_ready: list[str] = msgspec.field(default_factory=list)
    # How many `pods_ready` told readiness lost, and how many told it regained after (each one
    # a new fact: its count is in its event id). Marks of before have none.
    lost: int = 0
    regained: int = 0
    finished: list[str] = msgspec.field(default_factory=list)
    job_finished: str = ""  # uid of the Job whose end was published
    # check name → the last answer seen in the Kueue Workload's status (`check_updates`)
    checks: dict[str, str] = msgspec.field(default_factory=dict)
    active: bool | None = None  # the Kueue Workload's spec.active last seen (None: never)
    copy_status: str = ""  # `translate.copy_status_mark` of the copy's status last published

    def record(self, out: Outgoing, uids: Iterable[str]) -> None:
        """Remember that `out` (from `due_events`) was published for pods `uids`."""
        if out.field == "pods_pending":
            self.pending.append(out.id_key.rsplit("/", 1)[-1])
            self.pending_count = out.payload.count
            return
        if out.field == "pods_ready" and out.payload.lost:
            self.lost += 1
            return
        if out.field == "pods_ready" and self.lost > self.regained:
            self.regained += 1
        self._cover(_covering(out.field, out.payload), uids)

    def recall(self, env: events_pb2.Envelope) -> None:
        """Remember what `env`, one of the watcher's own pod events read back from the stream,
        says was published, as `record` did when it was; but for the readiness counts (`lost`,
        `regained`), which only the stored marks hold. An event written before events carried
        their pods' uids says nothing (the watcher of before stored its marks)."""
        field = env.WhichOneof("payload")
        if field == "pods_pending":
            told = env.pods_pending
            self.pending_count = told.count or len(told.pods)  # count: 0 in events of before
            if told.count > len(told.pods):
                return  # not every pod listed: the set is unknown here (its mark says it)
            digest = _digest(p.uid for p in env.pods_pending.pods)
            if digest not in self.pending:
                self.pending.append(digest)
        elif field in ("running", "pods_ready", "finished"):
            payload = getattr(env, field)
            if not (field == "pods_ready" and payload.lost):
                self._cover(_covering(field, payload), payload.pod_uids)

    def absorb(self, other: Sent) -> bool:
        """Add the pods and pending sets `other` covers (recalled from the stream) to these;
        whether that added any."""

        def size() -> tuple[int, ...]:
            marks = (len(getattr(self, f)) for f in _POD_FIELDS)
            return (len(self.pending), self.pending_count, *marks)

        before = size()
        self.pending.extend(d for d in other.pending if d not in self.pending)
        self.pending_count = other.pending_count or self.pending_count  # the stream's is later
        for field in _POD_FIELDS:
            self._cover((field,), getattr(other, field))
        return before != size()

    def _cover(self, fields: Iterable[str], uids: Iterable[str]) -> None:
        for field in fields:
            getattr(self, field).extend(sorted(set(uids) - set(getattr(self, field))))

    def names_pods_except(self, uids: Collection[str]) -> bool:
        """Whether these marks name a pod not among `uids` (a pending set: none left)."""
        if not uids and (self.pending or self.pending_count):
            return True
        return any(u not in uids for field in _POD_FIELDS for u in getattr(self, field))

    def forget_pods_except(self, uids: Iterable[str]) -> None:
        """Drop marks of pods that are gone; pending-set digests go when no pod is pending."""
        keep = set(uids)
        self.running = [u for u in self.running if u in keep]
        self.unready = [u for u in self.unready if u in keep]
        self.pods_ready = [u for u in self.pods_ready if u in keep]
        self.finished = [u for u in self.finished if u in keep]
        if not keep:
            self.regained = self.lost  # a loss ends with its pods; the counts keep ids unique
            self.pending = []
            self.pending_count = 0

    @property
    def empty(self) -> bool:
        return not (
            self.submitted
            or self.pending
            or self.pending_count
            or self.running
            or self.unready
            or self.pods_ready
            or self.lost > self.regained
            or self.finished
            or self.job_finished
            or self.copy_status
            or self.checks
        )


_POD_FIELDS = ("running", "unready", "pods_ready", "finished")


def _covering(field: str, payload: Any) -> tuple[str, ...]:
    """The marks of `Sent` an event of `field` adds its pods to: a `running` that said not
    ready adds them to `unready` too."""
    if field == "running" and not payload.pods_ready:
        return ("running", "unready")
    return (field,)


def pod_state_of_view(pod: PodView) -> PodState | None:
    """The PodState of a listed pod, or None for a pod of no workload or gang."""
    if not pod.group:
        return None
    return PodState(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        workload=pod.group,
        pod_set=pod.pod_set,
        node=pod.node_name,
        phase=pod.phase,
        ready=pod.ready,
        admission=pod.admission,
    )


def pod_state(obj: Mapping[str, Any]) -> PodState | None:
    """The PodState of Kubernetes-shaped pod `obj`, or None when it belongs to no workload or
    gang (`report_key`: its Workload API pod group, PodGroup, Kueue workload or
    scheduling.k8s.io PodGroup)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace = meta.get("namespace") or "default"
    spec = obj.get("spec") or {}
    ref = spec.get("workloadRef")
    workload_ref = (
        (
            str(ref.get("name", "")),
            str(ref.get("podGroup", "")),
            str(ref.get("podGroupReplicaKey", "")),
        )
        if isinstance(ref, dict)
        else None
    )
    group = spec.get("schedulingGroup")
    scheduling_group = group.get("podGroupName", "") if isinstance(group, dict) else ""
    workload = report_key(namespace, labels, workload_ref, scheduling_group=str(scheduling_group))
    if not workload:
        return None
    status = obj.get("status") or {}
    annotations = meta.get("annotations") or {}
    pod_set = annotations.get(POD_SET_ANNOTATION) or (workload_ref[1] if workload_ref else "")
    return PodState(
        namespace=namespace,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        workload=workload,
        pod_set=str(pod_set),
        node=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or PENDING),
        ready=is_ready(status),
        message=str(status.get("message") or status.get("reason") or ""),
        of_job=any(
            isinstance(ref, dict)
            and ref.get("controller")
            and (ref.get("apiVersion"), ref.get("kind")) == ("batch/v1", "Job")
            for ref in meta.get("ownerReferences") or []
        ),
        traceparent=str(annotations.get(TRACEPARENT_ANNOTATION) or ""),
        partition=str(annotations.get(PARTITION_ANNOTATION) or ""),
        admission=admission_of(obj),
    )


def counts_ready(pod: PodState) -> bool:
    """Kueue's rule for a Job (`status.ready + status.succeeded >= pods`): a pod counts as
    ready when its Ready condition is True while it runs, or once it has succeeded.

    Differs from Kueue for plain pod groups, where Kueue counts only pods whose Ready
    condition is True (a Succeeded pod's is False): muster applies the Job's rule to every
    workload, so a group whose first pods finish early is not taken for one that lost
    readiness.
    """
    return pod.phase == SUCCEEDED or (pod.phase == RUNNING and pod.ready)


class PodCounts(msgspec.Struct, kw_only=True):
    """A workload's pods counted as `due_events` looks at them, kept as each pod changes, so
    that a workload of many pods none of whose facts can be due yet is not looked at whole
    after each batch of its pod changes (a 50 000-pod Job: most of the watcher's time)."""

    total: int = 0
    started: int = 0  # Running or Succeeded
    failed: int = 0
    told_pending: int = 0  # pending, unbound, not started by the binder: told in pods_pending
    ready: int = 0  # `counts_ready`
    succeeded: int = 0
    # The last look at every pod found nothing due while they ran, all ready, and no pod has
    # come, gone or been replaced since (`settle`; the watcher's context clears it).
    settled: bool = False

    @classmethod
    def of(cls, pods: Iterable[PodState]) -> PodCounts:
        counts = cls()
        for pod in pods:
            counts.add(pod, 1)
        return counts

    def add(self, pod: PodState, sign: int) -> None:
        """Count `pod` in (`sign` 1) or out (-1)."""
        self.total += sign
        self.started += sign * (pod.phase in (RUNNING, SUCCEEDED))
        self.failed += sign * (pod.phase == FAILED)
        pending = pod.phase == PENDING and not pod.node and not started_by_binder(pod)
        self.told_pending += sign * pending
        self.ready += sign * counts_ready(pod)
        self.succeeded += sign * (pod.phase == SUCCEEDED)

    def quiet(self, sent: Sent) -> bool:
        """Whether `due_events` has nothing to say about these pods and `sent` but, maybe, a
        pods_pending (decided on the counts apart: `pending_news`): some pod has not started,
        none failed, and nothing but pending sets was told about them yet (so neither
        readiness nor an end is due, nor a mark to forget: pending sets' marks go with the
        last pod)."""
        told = sent.running or sent.unready or sent.pods_ready or sent.finished
        if self.settled and self.steady() and sent.running:
            return True  # running told, and only phases and readiness moved since, within steady
        return self.started < self.total and not self.failed and not told

    def steady(self) -> bool:
        """Every pod runs (or succeeded) and is ready, none failed, not all succeeded: a
        workload after its `running` until it ends or a pod fails, leaves or is not ready."""
        return (
            0 < self.total == self.started == self.ready
            and not self.failed
            and self.succeeded < self.total
        )

    def settle(self, *, told_nothing: bool) -> None:
        """A look at every pod (`due_events`, marks forgotten) found nothing due
        (`told_nothing`): while the pods stay the same and `steady`, nothing can be due, as
        what is due depends on the pods' phases and readiness and on `Sent`, which only the
        events told change. (A 100 000-pod Job's watcher read every pod at each batch of its
        pods' changes from `running` until it finished.)"""
        self.settled = told_nothing and self.steady()


def pending_news(pending: int, sent: Sent) -> bool:
    """Whether `pending` pods pending are to be told now: none were told yet, or their count
    reached `PENDING_STEP` times the last one told or fell to 1/`PENDING_STEP` of it. Any other
    change waits (`watcher.deferred`) until the pods are still for a moment, so that a gang
    applied pod by pod, one pod per watch batch, tells O(log N) growing sets, O(N) bytes in all,
    not a set per pod (8 000 pods: 2.2 GB of events; task podpending)."""
    told = sent.pending_count
    return pending > 0 and (
        not told or pending >= told * PENDING_STEP or pending * PENDING_STEP <= told
    )


def started_by_binder(pod: PodState) -> bool:
    """Whether muster's binder made `pod` for a Kueue admission: no `pods_pending` is told
    of it (issue 19: a store per workload that no service read). The binder knows what it
    started, gang-permit sees the pod and says why it waits (`gang_waiting`), and `running`
    follows; a gang outside Kueue (its pods applied by their owner) is still told pending.
    Read from the pod itself, so a watcher restarted anywhere decides alike."""
    return pod.admission > 0


def told_uids(uids: Iterable[str]) -> list[str]:
    """The uids a `running`, `pods_ready` or `finished` lists: all, sorted, up to
    MAX_TOLD_UIDS; none beyond, as events written before listed none. A workload of 50 000
    pods listed 1.9 MB of uids, over the bus's 1 MiB limit: the event was refused for good,
    so admission never saw it run or finish, and its quota stayed held. Without the list a
    watcher killed before the workload's marks are written (`marks.SEAL_AFTER_S`) tells it
    again after its restart, with the same event id (docs/events.md, "Large workloads' pod
    events")."""
    told = sorted(uids)
    return told if len(told) <= MAX_TOLD_UIDS else []


def listed_pending(
    pending: Sequence[PodState], *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> events_pb2.PodsPending:
    """A `pods_pending` of `pending` (sorted): all counted, listed in order while the list
    stays within half the bus's event limit. A gang of 20 000 pods pending listed 1.6 MB of
    pods, over the 1 MiB limit: refused for good, and the gang was never told pending."""
    budget = max_event_bytes // 2
    listed: list[events_pb2.PodRef] = []
    for p in pending:
        ref = _ref(p)
        budget -= ref.ByteSize() + 3  # the field's tag and length
        if budget < 0:
            break
        listed.append(ref)
    return events_pb2.PodsPending(pods=listed, count=len(pending))


def _digest(uids: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(sorted(uids)).encode()).hexdigest()[:16]


def _ref(p: PodState) -> events_pb2.PodRef:
    return events_pb2.PodRef(namespace=p.namespace, name=p.name, pod_set=p.pod_set, uid=p.uid)


def due_events(
    workload: str,
    pods: Sequence[PodState],
    sent: Sent,
    *,
    after_delete: bool = False,
    tell_pending: bool = True,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    owner_ready: bool | None = None,
) -> list[Outgoing]:
    """The events now due for `workload`, in the order to publish them.

    - unbound Pending pods → pods_pending listing all of them (once per set), but for pods
      the binder started for a Kueue admission (`started_by_binder`); only with
      `tell_pending` (the caller's `pending_news`, or the set still for a while);
    - every pod Running or Succeeded → running, with `pods_ready` set when every pod counts
      as ready too (`counts_ready`: its Ready condition, not its phase), or, with
      `owner_ready` given, when its owner says so (a JobSet: `translate.jobset_ready`);
    - after a `running` that said not ready, every pod ready → pods_ready, once;
    - after readiness was told, a pod not ready any more → pods_ready{lost}, and every pod
      ready again → pods_ready (`_recovery`: waitForPodsReady's recoveryTimeout);
    - every pod Succeeded → finished{succeeded}; any Failed → finished{not succeeded}; not
      for a Job's pods, whose end the Job tells (`translate.job_finished`).
    A workload whose pods finished before the watcher saw them run still gets running (and
    ready) first, so subscribers see the whole life. `after_delete`: a pod was just
    deleted (the workload is being stopped), so a smaller pending set is no news.
    """
    # Decided again after every batch of pod changes that touched the workload: the sorting
    # and digests only when an event is due (a Job of 50 000 pods spent most of its time
    # there, 200 batches over its pods while nothing but `running` at the end came due).
    if not pods:
        return []
    uids = {p.uid for p in pods}
    over = not uids.isdisjoint(sent.finished)
    out: list[Outgoing] = []

    def outgoing(field: str, payload: Any, id_key: str) -> Outgoing:
        first = min((p for p in pods if p.partition), key=_key, default=None)
        partition = first.partition if first is not None else ""
        return Outgoing(
            field=field, payload=payload, id_key=id_key, workload=workload, partition=partition
        )

    if tell_pending and not after_delete and not over:
        pending = [
            p for p in pods if p.phase == PENDING and not p.node and not started_by_binder(p)
        ]
        digest = _digest(p.uid for p in pending) if pending else ""
        if pending and digest not in sent.pending:
            pending.sort(key=_key)
            listed = listed_pending(pending, max_event_bytes=max_event_bytes)
            out.append(outgoing("pods_pending", listed, f"pods_pending/{digest}"))
    failed = [p for p in pods if p.phase == FAILED]
    started = all(p.phase in (RUNNING, SUCCEEDED) for p in pods)
    ready = started and (all(counts_ready(p) for p in pods) if owner_ready is None else owner_ready)
    done = started and all(p.phase == SUCCEEDED for p in pods)
    if started and uids.isdisjoint(sent.running) and not over:
        running = events_pb2.WorkloadRunning(pods_ready=ready, pod_uids=told_uids(uids))
        out.append(outgoing("running", running, f"running/{_digest(uids)}"))
    elif (
        ready
        and not uids.isdisjoint(sent.unready)
        and uids.isdisjoint(sent.pods_ready)
        and not over
    ):
        ready_now = events_pb2.PodsReady(pod_uids=told_uids(uids))
        out.append(outgoing("pods_ready", ready_now, f"pods_ready/{_digest(uids)}"))
    of_job = any(p.of_job for p in pods)
    if not over and not (failed and not of_job):  # a failed pod ends a pod group
        out += _recovery(
            uids, pods, sent, of_job=of_job, owner_ready=owner_ready, outgoing=outgoing
        )
    if (done or failed) and not of_job and not over:
        if failed:
            first = min(failed, key=_key)
            why = f": {first.message}" if first.message else ""
            message = f"pod {first.key} failed{why}"
            if len(failed) > 1:
                message += f" (and {len(failed) - 1} more)"
        else:
            message = f"{len(pods)} of {len(pods)} pods succeeded"
        ended = events_pb2.WorkloadFinished(
            succeeded=not failed, message=message, pod_uids=told_uids(uids)
        )
        out.append(outgoing("finished", ended, f"finished/{_digest(uids)}"))
    return out


def _key(p: PodState) -> str:
    return p.key


def _recovery(
    uids: set[str],
    pods: Sequence[PodState],
    sent: Sent,
    *,
    of_job: bool,
    owner_ready: bool | None,
    outgoing: Callable[[str, Any, str], Outgoing],
) -> list[Outgoing]:
    """Readiness lost, or regained after it was lost, since it was told (Kueue's job
    reconciler: PodsReady False with WaitForRecovery, then True with Recovered).

    A Job replaces its failed pods: those stay listed but are not counted, and their
    replacements (Pending until they run and are ready) are. `owner_ready`, when given,
    decides instead of the pods (a JobSet's counts).
    """
    told = not uids.isdisjoint(sent.running) and (
        uids.isdisjoint(sent.unready) or not uids.isdisjoint(sent.pods_ready)
    )
    if not told:
        return []
    live = [p for p in pods if not (of_job and p.phase == FAILED)]
    ready = bool(live) and all(counts_ready(p) for p in live)
    if owner_ready is not None:
        ready = owner_ready
    lost = sent.lost > sent.regained
    if ready == (not lost):
        return []
    count = sent.lost + 1 if not lost else sent.regained + 1
    payload = events_pb2.PodsReady(lost=not ready, pod_uids=told_uids(uids))
    id_key = f"pods_ready/{'lost' if not ready else 'regained'}/{_digest(uids)}/{count}"
    return [outgoing("pods_ready", payload, id_key)]
