"""The watcher's status task (Kubernetes only): keeps the status of the cluster's Kueue
Workloads, ClusterQueues and LocalQueues, and the conditions of its scheduling.k8s.io
PodGroups (`group_status`), what muster decided; the status of its Jobs that MultiKueue
manages, their copy's in the worker they run on (`job_mirror`); and records Kubernetes
Events of what happens to them from now on (`kube_events`: not those of the events replayed
at start, which were recorded before or are stale).

It follows the cluster's workload events, admission's `queue.status` and the config events
(which queues exist here), folds them into a `StatusBook`, and desires each changed status
from a `StatusSink` (the coalescing, rate-limited `StatusWriter`). A desire returns at once, so
a slow or failing API server never holds up a decision: the newest status wins when it is
written. At start it replays the cluster's events, then desires every status once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from muster.api.check_states import ChecksWanted
from muster.api.model import AdmissionFairSharingConfig, RequeuingStrategy
from muster.bus.connection import Bus
from muster.bus.subjects import config_subject, queue_subject, workload_filters
from muster.cluster.backend import ClusterChange
from muster.cluster.keys import SCHEDULING_POD_GROUP_KIND
from muster.cluster.kube.references import Reference
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.group_status import GANG_EVENTS, GroupStatusBook
from muster.watcher.job_mirror import Desire, JobMirror
from muster.watcher.kube_events import EVENT_SOURCES, EventBook
from muster.watcher.kueue_status.book import StatusBook
from muster.watcher.kueue_status.followed import (
    ACTIVE_CHANGED,
    EVICTION_COMPLETED,
    READINESS_EVENTS,
    RECLAIMABLE_PODS,
    WORKLOAD_EVENTS,
)

log = logging.getLogger(__name__)


class EventSink(Protocol):
    """Where Kubernetes Events go (`muster.cluster.kube.events.EventRecorder`)."""

    def record(
        self,
        regarding: Reference,
        *,
        type_: str,
        reason: str,
        note: str,
        action: str,
        controller: str = "",
    ) -> None: ...

    def learn(self, obj: Mapping[str, Any]) -> None:
        """The uid of an object the watch shows."""


class WorkerConfigs(Protocol):
    """Where the config events go that declare MultiKueueClusters (`worker_status`)."""

    def apply(self, env: pb.Envelope) -> None: ...

    def desire_all(self) -> None: ...


class StatusSink(Protocol):
    def desire(
        self, ref: ObjectRef, status: Mapping[str, Any], *, checks: ChecksWanted | None = None
    ) -> None: ...


# What is said of a workload dispatched to a worker cluster (MultiKueue) is published on that
# worker's subjects: admission's decisions, its check's answers, the worker's `finished`,
# `eviction_completed` and its copy's status.
DISPATCHED_EVENTS = (
    "pending",
    "quota_reserved",
    "admitted",
    "evicted",
    "requeued",
    "finished",
    "eviction_completed",
    "admission_check",
    "copy_status",
)


def status_subjects(cluster: str, *, pods_ready: bool = False) -> list[str]:
    """The subjects whose events change the statuses of `cluster`'s Kueue objects and
    scheduling.k8s.io PodGroups: its own, and every cluster's about a workload's admission
    and end (a workload submitted here may run in a worker cluster); with `pods_ready`
    (waitForPodsReady on) its own pods' readiness too."""
    readiness = READINESS_EVENTS if pods_ready else ()
    events = dict.fromkeys(
        (
            *WORKLOAD_EVENTS,
            EVICTION_COMPLETED,
            ACTIVE_CHANGED,
            RECLAIMABLE_PODS,
            *GANG_EVENTS,
            *EVENT_SOURCES,
            *readiness,
        )
    )
    return [
        *(f for e in DISPATCHED_EVENTS for f in workload_filters("*", e)),
        *(f for e in events if e not in DISPATCHED_EVENTS for f in workload_filters(cluster, e)),
        queue_subject(cluster),
        config_subject(cluster, ">"),
    ]


_WHERE_IT_RUNS = ("admitted", "finished", "copy_status", "deleted")


class RunsOn:
    """Which events about this cluster's workloads count, by where they come from: a
    workload's `finished` and `copy_status` only from the cluster it was last admitted to (a
    lost worker that returns may still report a stale copy), anything else only when it is
    about a workload submitted here (another cluster's workloads have their own watcher)."""

    def __init__(self, cluster: str) -> None:
        self._cluster = cluster
        self._admitted: dict[str, str] = {}  # workload → the cluster it was last admitted to

    def counts(self, env: pb.Envelope) -> bool:
        field = env.WhichOneof("payload")
        if env.cluster == self._cluster and field not in _WHERE_IT_RUNS:
            return True
        if field == "admitted":
            self._admitted[env.workload] = env.cluster
        elif field in ("finished", "copy_status"):
            return env.cluster == self._admitted.get(env.workload, self._cluster)
        elif field == "deleted":
            self._admitted.pop(env.workload, None)
        return True


class GroupStatuses:
    """The PodGroup conditions of one cluster: folded from gang events (`apply`), desired once
    the cluster watch has shown the PodGroup (`seen`)."""

    def __init__(self, sink: StatusSink) -> None:
        self.sink = sink
        self.book = GroupStatusBook()

    def seen(self, change: ClusterChange) -> None:
        """A PodGroup or CompositePodGroup as the cluster watch shows it."""
        meta = change.obj.get("metadata") or {}
        namespace = meta.get("namespace", "")
        key = f"{namespace}/{meta.get('name', '')}"
        if change.type == "DELETED":
            self.book.forget(key)
            return
        name = (change.obj.get("spec") or {}).get("parentCompositePodGroupName") or ""
        parent = f"{namespace}/{name}" if name else ""
        if change.kind != SCHEDULING_POD_GROUP_KIND:  # a CompositePodGroup: a link only
            self.book.learn_parent(key, parent)
            return
        ref = self.book.learn(key, str(change.obj.get("apiVersion", "")), parent=parent)
        if ref is not None:
            self._desire([ref])

    def apply(self, env: pb.Envelope) -> None:
        self._desire(self.book.apply(env))

    def _desire(self, refs: list[ObjectRef]) -> None:
        for ref in refs:
            status = self.book.status_of(f"{ref.namespace}/{ref.name}")
            if status is not None:
                self.sink.desire(ref, status)


def _desire(book: StatusBook, sink: StatusSink, refs: list[ObjectRef]) -> None:
    for ref in refs:
        status = book.status_of(ref)
        if status is not None:
            sink.desire(ref, status, checks=book.checks_of(ref))


def _desire_jobs(sink: StatusSink, desires: list[Desire]) -> None:
    for ref, status in desires:
        sink.desire(ref, status)


async def write_statuses(
    bus: Bus,
    sink: StatusSink,
    *,
    cluster: str,
    kueue_version: str,
    pods_ready: bool = False,
    granular: bool = True,
    requeuing: RequeuingStrategy | None = None,
    fair: AdmissionFairSharingConfig | None = None,
    reclaimable_pods: bool = True,
    groups: GroupStatuses | None = None,
    events: tuple[EventBook, EventSink] | None = None,
    workers: WorkerConfigs | None = None,
) -> None:
    """Desire the status of every Kueue object of `cluster` (and, with `groups`, of its
    PodGroups; of its Jobs managed by MultiKueue: `job_mirror`) as events change it, and with
    `events` record their Kubernetes Events, until cancelled; `workers` is told which
    MultiKueueClusters the config events declare. `pods_ready`: waitForPodsReady is on, so
    Workloads carry Kueue's PodsReady condition; `granular`: Kueue's
    UnadmittedWorkloadsObservability gate is on; `requeuing`: waitForPodsReady's back-off;
    `fair`: its admissionFairSharing (LocalQueues' fairSharing status); `reclaimable_pods`:
    Kueue's gate ReclaimablePods is on (that status counts pods less reclaimable ones)."""
    book = StatusBook(
        kueue_version=kueue_version,
        cluster=cluster,
        pods_ready=pods_ready,
        granular=granular,
        requeuing=requeuing,
        fair=fair,
        reclaimable_pods=reclaimable_pods,
    )
    mirror = JobMirror()
    subjects = status_subjects(cluster, pods_ready=pods_ready)
    runs_on = RunsOn(cluster)
    last = await bus.last_sequence()
    if last:
        async for env in bus.replay(subjects, until_sequence=last):
            if not runs_on.counts(env):
                continue
            book.apply(env)
            mirror.apply(env)
            if workers is not None:
                workers.apply(env)
            if groups is not None:
                groups.book.apply(env)
            if events is not None:
                events[0].apply(env)  # what it knows of each workload, nothing recorded
    refs = list(book.refs())
    _desire(book, sink, refs)
    _desire_jobs(sink, mirror.desired())
    if workers is not None:
        workers.desire_all()
    if groups is not None:
        groups._desire(list(groups.book.refs()))
    log.info("status of %d Kueue objects of cluster %s desired after replay", len(refs), cluster)
    async with asyncio.TaskGroup() as tasks:
        if fair is not None and fair.usage_sampling_interval_s > 0:
            tasks.create_task(
                sample_fair_sharing(book, sink, interval_s=fair.usage_sampling_interval_s),
                name="watcher-afs-samples",
            )
        async for env in bus.replay(
            subjects, from_sequence=last + 1, follow=True, watched="watcher-status"
        ):
            if not runs_on.counts(env):
                continue
            _desire(book, sink, sorted(book.apply(env), key=str))
            _desire_jobs(sink, mirror.apply(env))
            if workers is not None:
                workers.apply(env)
            if groups is not None:
                groups.apply(env)
            if events is not None:
                for spec in events[0].apply(env):
                    events[1].record(
                        spec.regarding,
                        type_=spec.type,
                        reason=spec.reason,
                        note=spec.note,
                        action=spec.action,
                        controller=spec.controller,
                    )


async def sample_fair_sharing(
    book: StatusBook,
    sink: StatusSink,
    *,
    interval_s: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Desire the LocalQueues' re-sampled admission fair sharing status as each falls due
    (`StatusBook.sample`), until cancelled. A sample falls due an interval after the last, or
    later (a settled entry penalty restarts the clock): never sooner than the next due now."""
    while True:
        now_s = clock()
        _desire(book, sink, sorted(book.sample(now_s), key=str))
        due_s = book.next_sample_s()
        wait_s = interval_s if due_s is None else min(interval_s, max(0.0, due_s - now_s))
        # Just past it: a look a little early would find nothing due.
        await sleep(wait_s + 0.01)
