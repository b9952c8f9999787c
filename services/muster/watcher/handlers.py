"""The watcher's handlers: one per kind of cluster change, each publishing what it implies.

Config objects and Namespaces → config.applied/deleted; queued Jobs and JobSets and Kueue
Workloads → workload.submitted/deleted (a Job first gets its Kueue Workload on Kubernetes) and
a Job's or JobSet's end → finished; a MultiKueue copy's status → copy_status; what check
controllers write into any Kueue Workload's `status.admissionChecks` → admission_check; pods
of a workload → pods_pending, running (with their readiness), finished.
Each event id is derived from the fact (`Outgoing.id_key`), and what was sent is remembered
(`MarksStore`: what the pods' events say is read back from the stream at start, the rest is
kept in `MUSTER_WATCHER`), so no fact is published twice, across restarts too. Handlers do no
I/O of their own (but a Job's Kueue Workload): events go to the batch's `Outbox` and marks are
written when the batch is over (`muster.watcher.service`).

Tracing: a workload the watcher reports first (`submitted`) starts its trace here (or continues
the one its object's `muster.dev/traceparent` names); what its pods do is reported in the
trace their `muster.dev/traceparent` names (the binder's), else in the one started here. With
spans recorded, each event is the span `watcher.translate` in that trace.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from opentelemetry import trace

from muster.api.ids import uuid5_text
from muster.api.wellknown import TRACEPARENT_ANNOTATION
from muster.bus.envelope import DEFAULT_MAX_EVENT_BYTES, new_event
from muster.bus.errors import Reject
from muster.bus.partitions import QueuePartitions
from muster.bus.tracing import continue_trace, headers_of_envelope
from muster.cluster.backend import ClusterChange
from muster.cluster.kube import copies, jobsets
from muster.contracts.v1 import events_pb2
from muster.payloads import PayloadError, applied_object
from muster.watcher import translate
from muster.watcher.deferred import DeferredPending
from muster.watcher.outbox import Outbox
from muster.watcher.pods import PodCounts, PodState, Sent, due_events, pending_news, pod_state
from muster.watcher.translate import Outgoing

log = logging.getLogger(__name__)

WATCHER_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "watcher.muster.dev")


class MarksStore(Protocol):
    """What the watcher sent per workload: `load` gives the marks to change in place, `save`
    says they changed in a way only the `MUSTER_WATCHER` bucket can keep (written at the
    batch's end), `note` that they changed as the events just published tell (a restart reads
    those back: `KvMarks.recall`)."""

    def load(self, workload: str) -> Sent: ...

    def save(self, workload: str, sent: Sent) -> None: ...

    def note(self, workload: str, sent: Sent) -> None: ...


class KueueWorkloads(Protocol):
    """Where a queued Job gets its Kueue Workload (`StatusWriter`, on Kubernetes)."""

    async def create_workload_for_job(self, job: Mapping[str, Any]) -> str: ...


class WatcherContext:
    """What the handlers share: cluster id, outbox, marks, the pods seen per workload, and
    (on Kubernetes) where Jobs get their Kueue Workloads."""

    def __init__(
        self,
        *,
        cluster: str,
        outbox: Outbox,
        marks: MarksStore,
        workloads: KueueWorkloads | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        pods: dict[str, dict[str, PodState]] | None = None,
        queues: QueuePartitions | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        deferred: DeferredPending | None = None,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.max_event_bytes = max_event_bytes  # the bus's: a larger event is refused
        self.outbox = outbox
        self.marks = marks
        self.workloads = workloads
        self.clock_ns = clock_ns
        self.source = f"watcher/{cluster}"
        # workload key → pod key → state (`pods`: a dict shared with others who read it)
        self.pods: dict[str, dict[str, PodState]] = {} if pods is None else pods
        self.pod_counts: dict[str, PodCounts] = {}  # of `pods`, per workload
        # Workloads whose pending set changed and was not told yet (`pending_news`).
        self.deferred = DeferredPending() if deferred is None else deferred
        self.monotonic_s = monotonic_s
        # Change key → id key of the config.applied last published (a restart sends each once).
        self.configs: dict[str, str] = {}
        # Workload → the trace its `submitted` (published here) went in, until it is deleted.
        self.traces: dict[str, dict[str, str]] = {}
        # Each LocalQueue's admission partition (MUSTER_PARTITIONS), and the partition each
        # workload's events went to, so that a later one goes there too.
        self.queues = queues or QueuePartitions()
        self.homes: dict[str, str] = {}
        # Workload → whether its JobSet's counts say its pods are ready (Kueue's JobSet
        # PodsReady), which decides instead of its pods (`due_events`' `owner_ready`).
        self.owner_ready: dict[str, bool] = {}

    def seed(self, pod: PodState) -> None:
        """Know `pod` without publishing anything (a restart's initial list). Its workload's
        pending set, if any, is decided soon (`deferred`): the watcher stopped may not have
        told the last one, and no change may come to decide it."""
        self.put_pod(pod)
        pending = self.counts(pod.workload).told_pending
        if pending and pod.workload not in self.deferred:
            self.deferred.defer(pod.workload, now_s=self.monotonic_s(), pending=pending)

    def counts(self, workload: str) -> PodCounts:
        """`workload`'s pods counted (`PodCounts`), kept as `put_pod` and `drop_pod` change
        them; counted from `pods` the first time (a dict given at start)."""
        counts = self.pod_counts.get(workload)
        if counts is None:
            counts = PodCounts.of(self.pods.get(workload, {}).values())
            self.pod_counts[workload] = counts
        return counts

    def put_pod(self, pod: PodState) -> None:
        counts = self.counts(pod.workload)
        pods = self.pods.setdefault(pod.workload, {})
        old = pods.get(pod.key)
        if old is not None:
            counts.add(old, -1)
        if old is None or old.uid != pod.uid:
            counts.settled = False  # another pod: look at them all again
        pods[pod.key] = pod
        counts.add(pod, 1)

    def drop_pod(self, pod: PodState) -> None:
        counts = self.counts(pod.workload)
        old = self.pods.get(pod.workload, {}).pop(pod.key, None)
        if old is not None:
            counts.add(old, -1)
            counts.settled = False  # its marks are to be forgotten

    def forget_workload(self, workload: str) -> None:
        """Its last pod is gone: forget its pods, and where its events went when no `deleted`
        of it will ever come from here (no Workload objects: the sim cluster's gateway
        publishes those), else `homes` grew by every workload ever run. A pod of it made again
        carries its partition (the binder's annotation), so nothing later needs the home."""
        self.pods.pop(workload, None)
        self.pod_counts.pop(workload, None)
        if self.workloads is None:
            self.homes.pop(workload, None)

    def envelope(self, out: Outgoing) -> events_pb2.Envelope:
        # Deterministic: the same fact seen again (a resumed watch) is deduplicated by JetStream.
        fact = f"{self.cluster}/{out.workload}/{out.id_key}"
        return new_event(
            out.field,
            out.payload,
            cluster=self.cluster,
            workload=out.workload,
            generation=out.generation,
            source=self.source,
            now_ns=self.clock_ns(),
            partition=self.partition_of(out),
            event_id=uuid5_text(WATCHER_ID_NAMESPACE, fact),
        )

    def partition_of(self, out: Outgoing) -> str:
        """The partition of `out`'s workload: what its pods say, else the one its earlier
        events went to, else its LocalQueue's; "" for a workload of no LocalQueue (a gang)."""
        partition = out.partition or self.homes.get(out.workload, "")
        if not partition and out.local_queue:
            namespace, _, name = out.local_queue.partition("/")
            partition = self.queues.of(namespace, name)
        if partition and out.field != "deleted":
            self.homes[out.workload] = partition
        else:
            self.homes.pop(out.workload, None)
        return partition

    def publish(
        self,
        out: Outgoing,
        *,
        trace_headers: Mapping[str, str] | None = None,
        new_trace: bool = False,
    ) -> events_pb2.Envelope:
        """Publish `out` with the batch (the outbox keeps one workload's events in order), in
        the trace `trace_headers` carry (`new_trace`: a new one without them)."""
        with continue_trace(
            trace_headers or {},
            "watcher.translate",
            kind=trace.SpanKind.PRODUCER,
            attributes=lambda: {"muster.workload": out.workload, "muster.event": out.field},
            new_trace=new_trace,
        ):
            env = self.envelope(out)
        if (size := env.ByteSize()) > self.max_event_bytes:
            # Refused here, not only by the publisher after the batch: the object that made
            # it is then dead-lettered with a Warning Event on it saying why.
            raise Reject(
                f"{out.workload or 'its configuration'}: the {out.field} event is {size} bytes,"
                f" over the limit of {self.max_event_bytes} (fewer resources, podsets or a"
                " smaller pod template make it smaller)"
            )
        self.outbox.add(env)
        return env


async def on_config(change: ClusterChange, ctx: WatcherContext) -> None:
    """A config object or Namespace changed: config.applied once per configuration (a status
    write changes none), or config.deleted."""
    if change.type == "DELETED":
        ctx.configs.pop(change.key, None)
        ctx.publish(translate.config_deleted(change.obj))
        return
    out = translate.config_applied(change.obj)
    if ctx.configs.get(change.key) == out.id_key:
        return
    try:  # as admission reads it: one it would refuse is refused here, on the object itself
        applied_object(out.payload)
    except PayloadError as err:
        raise Reject(str(err)) from None
    ctx.publish(out)
    ctx.configs[change.key] = out.id_key


async def on_kueue_workload(change: ClusterChange, ctx: WatcherContext) -> None:
    """A Kueue Workload changed: publish each check controller's new answer once, and its
    spec.active when someone changed it (kueuectl stop|resume workload, `kubectl patch`)."""
    meta = change.obj.get("metadata") or {}
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    sent = ctx.marks.load(key)
    if change.type == "DELETED":
        if sent.checks or sent.active is not None:
            sent.checks, sent.active = {}, None
            ctx.marks.save(key, sent)
        return
    changed = translate.active_change(change.obj, sent.active)
    if changed is not None:
        ctx.publish(changed, trace_headers=ctx.traces.get(key))
    answers = translate.check_updates(change.obj, sent.checks)
    for answer in answers:
        if answer.event is not None:
            ctx.publish(answer.event)
        sent.checks[answer.name] = answer.mark
    active = translate.spec_active(change.obj)
    if answers or sent.active != active:
        sent.active = active
        ctx.marks.save(key, sent)


async def on_workload_object(change: ClusterChange, ctx: WatcherContext) -> None:
    """A queued Job or JobSet or a Kueue Workload changed: submitted once per incarnation,
    finished once a Job or JobSet says it is over, or deleted; what else a Kueue Workload
    says (`on_kueue_workload`)."""
    wl, problems = translate.workload_of(change.obj)
    if wl is None:
        why = "; ".join(problems)
        if change.type == "DELETED":  # nothing of it was taken in: nothing to undo
            log.warning("ignoring %s: %s", change.key, why, extra={"key": change.key})
            return
        # Dead-lettered with its problems, as Kueue records ErrWorkloadCompose on such a Job:
        # a log line alone left a Job muster cannot read suspended with no word anywhere.
        raise Reject(why)
    if translate.is_kueue_workload(change.obj):
        await on_kueue_workload(change, ctx)
    if change.type == "DELETED":
        ctx.owner_ready.pop(wl.key, None)
        publish_deleted(ctx, translate.deleted(wl))
        return
    sent = ctx.marks.load(wl.key)
    owner = translate.is_owner(change.obj)
    mark = translate.incarnation(wl)
    if sent.submitted != mark:
        if owner and ctx.workloads is not None:
            # Before `submitted`: its status is written there once admission decides.
            await ctx.workloads.create_workload_for_job(translate.as_written(change.obj))
        manifest = translate.owner_manifest(change.obj) if owner else ""
        env = ctx.publish(
            translate.submitted(wl, owner=manifest),
            trace_headers=_object_trace(change.obj),
            new_trace=True,
        )
        ctx.traces[wl.key] = headers_of_envelope(env.traceparent, env.tracestate)
        sent.submitted, sent.reclaimable = mark, translate.reclaimable_mark(wl)
        ctx.marks.save(wl.key, sent)
    elif (reclaimed := translate.reclaimable_change(change.obj, wl, sent.reclaimable)) is not None:
        ctx.publish(reclaimed, trace_headers=ctx.traces.get(wl.key))
        sent.reclaimable = translate.reclaimable_mark(wl)
        ctx.marks.save(wl.key, sent)
    if owner and not copies.managed_by_multikueue(change.obj):
        # One managed by MultiKueue ends where it runs: its status here is the copy's, mirrored.
        _job_end(change.obj, wl.key, ctx)
        _owner_readiness(change.obj, wl.key, ctx)


def publish_deleted(ctx: WatcherContext, out: Outgoing) -> None:
    """Publish `out`, a workload's `deleted`, and forget that it was submitted (a new life
    of it is submitted again)."""
    ctx.publish(out, trace_headers=ctx.traces.pop(out.workload, None))
    sent = ctx.marks.load(out.workload)
    sent.submitted = ""
    ctx.marks.save(out.workload, sent)


def _job_end(job: Mapping[str, Any], key: str, ctx: WatcherContext) -> None:
    """Publish workload `key`'s `finished` once its Job (or JobSet) says it is over."""
    finished = translate.job_finished(job, key)
    uid = str((job.get("metadata") or {}).get("uid", ""))
    sent = ctx.marks.load(key)
    if finished is not None and sent.job_finished != uid:
        ctx.publish(finished, trace_headers=ctx.traces.get(key))
        sent.job_finished = uid
        ctx.marks.save(key, sent)


async def on_copy(change: ClusterChange, ctx: WatcherContext) -> None:
    """A copy here of a workload submitted in another cluster (MultiKueue: labelled with its
    origin): no workload of this cluster's, so never submitted or deleted from here; its Job's
    (JobSet's) status, each time it changes, is the workload's `copy_status` (the manager
    mirrors it onto its Job or JobSet), and its end the workload's `finished`, under the
    workload's own key (its pods report under it too: the binder labelled them so)."""
    if not translate.is_owner(change.obj):
        return
    key = copies.copied_workload(change.obj)
    if key and change.type == "DELETED":
        ctx.owner_ready.pop(key, None)
    elif key:
        _copy_status(change.obj, key, ctx)
        _job_end(change.obj, key, ctx)
        _owner_readiness(change.obj, key, ctx)


def know_owner_readiness(ctx: WatcherContext, objects: Iterable[Mapping[str, Any]]) -> None:
    """Know what each listed JobSet (or a worker's copy of one) says of its pods' readiness
    without deciding anything: a resumed start decides its pods right after (`know_listed`),
    by the JobSet's counts rather than by the pods until the watch shows the JobSet."""
    if ctx.workloads is None:
        return  # a simulated cluster: no JobSet controller counts its Jobs (`_owner_readiness`)
    for obj in objects:
        if copies.origin_of(obj):
            key = copies.copied_workload(obj)
        elif copies.managed_by_multikueue(obj):
            continue  # it runs in a worker: no pods of it here
        else:
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{jobsets.workload_name(obj)}"
        ready = translate.jobset_ready(obj)
        if key and ready is not None:
            ctx.owner_ready[key] = ready


def _owner_readiness(owner: Mapping[str, Any], key: str, ctx: WatcherContext) -> None:
    """Keep whether JobSet `owner` says workload `key`'s pods are ready (Kueue reads a
    JobSet's readiness from its replicatedJobsStatus, not from the pods); when that changes,
    decide its pods again, as no pod change may come to. On Kubernetes only (`ctx.workloads`):
    a simulated cluster has no JobSet controller keeping those counts (a JobSet there holds
    what its YAML said, or nothing), so its pods tell, the rule `muster simulate` applies."""
    if ctx.workloads is None:
        return
    ready = translate.jobset_ready(owner)
    if ready is None or ctx.owner_ready.get(key) == ready:
        return
    ctx.owner_ready[key] = ready
    if key in ctx.pods:
        ctx.counts(key).settled = False  # what is due depends on more than the pods now
        decide_pods(key, ctx)


def _copy_status(job: Mapping[str, Any], key: str, ctx: WatcherContext) -> None:
    """Publish workload `key`'s `copy_status` when its copy's status changed."""
    out = translate.copy_status(job, key)
    sent = ctx.marks.load(key)
    mark = translate.copy_status_mark(job.get("status") or {})
    if out is not None and sent.copy_status != mark:
        ctx.publish(out, trace_headers=ctx.traces.get(key))
        sent.copy_status = mark
        ctx.marks.save(key, sent)


async def on_pod(change: ClusterChange, ctx: WatcherContext) -> None:
    """A pod changed: publish whatever its workload's pods now make due."""
    pod = fold_pod(change, ctx)
    if pod is not None:
        publish_due(pod, ctx, after_delete=change.type == "DELETED")


def fold_pod(change: ClusterChange, ctx: WatcherContext) -> PodState | None:
    """Fold a pod change into `ctx.pods`; the pod (None: of no workload, not reported)."""
    pod = pod_state(change.obj)
    if pod is None:
        return None
    if change.type == "DELETED":
        ctx.drop_pod(pod)
    else:
        ctx.put_pod(pod)
    return pod


def publish_due(pod: PodState, ctx: WatcherContext, *, after_delete: bool) -> None:
    """Publish what the pods of `pod`'s workload now make due (`pod`: the last one changed;
    `after_delete`: that change deleted it)."""
    decide_pods(pod.workload, ctx, after_delete=after_delete, traceparent=pod.traceparent)


def decide_still(ctx: WatcherContext) -> int:
    """Decide the workloads whose pending pods have been still long enough (`ctx.deferred`),
    telling their pending sets not told yet; how many were decided. A bug deciding one is
    logged and the others decided: no change is left to dead-letter."""
    return decide_each(ctx, ctx.deferred.take_due(now_s=ctx.monotonic_s()), still=True)


def decide_each(
    ctx: WatcherContext,
    workloads: Sequence[str],
    *,
    still: bool = False,
    after_delete: bool = False,
) -> int:
    """Decide each of `workloads` (`decide_pods`); how many. A bug deciding one is logged and
    the others decided: no change is left to dead-letter, and stored data never stops the
    watcher."""
    for workload in workloads:
        try:
            decide_pods(workload, ctx, still=still, after_delete=after_delete)
        except Exception:
            log.exception("deciding the pods of %s failed", workload)
    return len(workloads)


def decide_pods(
    workload: str,
    ctx: WatcherContext,
    *,
    after_delete: bool = False,
    traceparent: str = "",
    still: bool = False,
) -> None:
    """Publish what `workload`'s pods now make due (`after_delete`: the last change deleted a
    pod; `traceparent`: the last pod's; `still`: its pods have not changed for a while, so
    the pending set is told whatever its count, `ctx.deferred`)."""
    pods = ctx.pods.get(workload, {})
    sent = ctx.marks.load(workload)
    counts = ctx.counts(workload)
    pending = counts.told_pending
    # After a delete a smaller set is no news now (the workload may be going pod by pod).
    tell = pending > 0 and not after_delete and (still or pending_news(pending, sent))
    if pending and not tell:
        ctx.deferred.defer(workload, now_s=ctx.monotonic_s(), pending=pending)
    else:
        ctx.deferred.drop(workload)
    if pods and not tell and counts.quiet(sent):
        return  # nothing due, nothing to forget: spares looking at every pod (`PodCounts`)
    due = due_events(
        workload,
        list(pods.values()),
        sent,
        after_delete=after_delete,
        tell_pending=tell,
        max_event_bytes=ctx.max_event_bytes,
        owner_ready=ctx.owner_ready.get(workload),
    )
    uids = [p.uid for p in pods.values()]
    traced = next((p.traceparent for p in pods.values() if p.traceparent), traceparent)
    headers = {"traceparent": traced} if traced else ctx.traces.get(workload)
    counts_told = (sent.lost, sent.regained)
    for out in due:
        ctx.publish(out, trace_headers=headers)
        sent.record(out, uids)
    had_pod_marks = bool(sent.pending or sent.running or sent.pods_ready or sent.finished)
    sent.forget_pods_except(uids)
    if pods:
        counts.settle(told_nothing=not due)
    else:
        ctx.forget_workload(workload)
    # The events say which pods they covered, so only what they cannot say is written: the
    # readiness counts, the end of the pods' marks (which forgets them), and a pending set
    # too large to list whole (a restart could not recall it from its event).
    if (
        (sent.lost, sent.regained) != counts_told
        or (not pods and had_pod_marks)
        or any(_unlisted(out) for out in due)
    ):
        ctx.marks.save(workload, sent)
    elif due:
        ctx.marks.note(workload, sent)


def _unlisted(out: Outgoing) -> bool:
    """Whether `out` is a pods_pending that does not list every pod it counts."""
    return out.field == "pods_pending" and out.payload.count > len(out.payload.pods)


class FoldedPods:
    """Pod changes folded into `ctx.pods` whose workloads are not decided yet.

    Deciding looks at every pod of the workload (level-triggered, `due_events`), so deciding
    after each pod change costs a workload of n pods n² (a 10 000-pod Job: minutes of a busy
    loop, and the watcher killed by its liveness probe). A run of pod changes is folded
    first, and each workload it touched decided once, on its last change: the states skipped
    between are ones a resumed watch may skip too, and `due_events` tells each fact alike.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[ClusterChange, PodState]] = {}

    async def fold(self, change: ClusterChange, ctx: WatcherContext) -> None:
        """A Handler: fold the pod change in, leaving its workload to decide (`take`)."""
        pod = fold_pod(change, ctx)
        if pod is not None:
            self._last[pod.workload] = (change, pod)

    def take(self) -> list[tuple[ClusterChange, Handler]]:
        """Per workload folded since the last take, its last change and the Handler that
        decides the workload (one that raises is dead-lettered with that change)."""
        taken = [(change, _deciding(pod)) for change, pod in self._last.values()]
        self._last.clear()
        return taken


def _deciding(pod: PodState) -> Handler:
    async def decide(change: ClusterChange, ctx: WatcherContext) -> None:
        publish_due(pod, ctx, after_delete=change.type == "DELETED")

    return decide


def _object_trace(obj: Mapping[str, Any]) -> dict[str, str] | None:
    """The trace a workload object names (`muster.dev/traceparent`), if any."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    parent = annotations.get(TRACEPARENT_ANNOTATION)
    return {"traceparent": parent} if isinstance(parent, str) and parent else None


Handler = Callable[[ClusterChange, WatcherContext], Awaitable[None]]


def handler_for(change: ClusterChange) -> Handler | None:
    """The handler of `change`, or None for objects the watcher does not report (Nodes)."""
    if change.kind == "Pod":
        return on_pod
    if copies.origin_of(change.obj) and change.kind in ("Job", "JobSet", "Workload"):
        return on_copy
    if translate.is_config(change.obj):
        return on_config
    if translate.is_workload_source(change.obj):
        return on_workload_object
    if translate.is_kueue_workload(change.obj):
        return on_kueue_workload  # a Job's Workload: the Job is the source
    return None
