"""The watcher service: follows one cluster's objects and publishes what they mean; on
Kubernetes it also writes the status of the cluster's Kueue objects (`status`).

Resumes the cluster watch after the last revision it handled (KV `MUSTER_WATCHER`, key
`<cluster>`). What it sent per workload is read back at start (`marks`): from its own pod
events in MUSTER_EVENTS, and from the same bucket (`<cluster>.wl.<ns>.<name>`: what those
cannot say), so a restart neither loses nor repeats a fact. Changes are handled in batches
(what arrived while the last batch was handled): a batch's events are published together,
then its marks written (only those its events cannot tell), then its revision stored.
Deletions a resumed watch cannot show (history compacted, tombstones pruned) are found by
a list: the watcher's own at a resumed start, and that of each watch that lists (from 0: a
first start, or once a resumed watch cannot resume), whose end the watch reports: what the
watcher holds that it did not show is gone (`resume`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import msgspec

from muster.api.model import AdmissionFairSharingConfig, RequeuingStrategy
from muster.bus.buckets import WATCHER_BUCKET
from muster.bus.cancel import raise_if_cancelling
from muster.bus.connection import Bus
from muster.bus.errors import BusError, Reject, Retry, Unavailable
from muster.bus.kv import Bucket
from muster.bus.poison import Quarantine
from muster.bus.progress import Wording, advanced
from muster.bus.subjects import workload_filters
from muster.bus.supervision import SupervisedGroup, supervised
from muster.cluster.backend import ClusterBackend, ClusterChange
from muster.cluster.errors import ClusterError, ExpiredError
from muster.cluster.keys import SCHEDULING_POD_GROUP_KIND
from muster.cluster.kube.references import reference_of
from muster.cluster.refusals import Refusals, rejected_event
from muster.watcher.cluster_id import warn_if_unconfigured
from muster.watcher.handlers import (
    FoldedPods,
    Handler,
    KueueWorkloads,
    WatcherContext,
    decide_still,
    handler_for,
    know_owner_readiness,
    on_pod,
)
from muster.watcher.kube_events import EventBook
from muster.watcher.marks import KvMarks, PutMany, until_done
from muster.watcher.outbox import Outbox
from muster.watcher.pods import POD_EVENTS, PodState, pod_state_of_view
from muster.watcher.resume import (
    Listed,
    delete_unlisted,
    drop_unlisted,
    know_listed,
    live_of,
)
from muster.watcher.status import EventSink, GroupStatuses, StatusSink, write_statuses
from muster.watcher.worker_status import WorkerStatuses

log = logging.getLogger(__name__)
T = TypeVar("T")

GROUP_KINDS = frozenset({SCHEDULING_POD_GROUP_KIND, "CompositePodGroup"})

BATCH_MAX = 256  # changes handled before their events are published and remembered
SAVE_INTERVAL_S = 0.1  # the revision is stored at most this often (and when stopping)
SEAL_ON_STOP_S = 5.0  # writing the marks not written yet, when stopping
# "watch watcher-watch stalled: 1 batch waiting, ... (revision 812 in hand)"
WATCH_BATCHES = Wording("watch", "batch", "revision", "moves again")


class Readiness(Protocol):
    def ready(self) -> None: ...


class WatcherConfig(msgspec.Struct, frozen=True, kw_only=True):
    cluster: str
    kueue_version: str = "v1beta1"  # the shape of LocalQueue statuses written (Kubernetes)
    check_controllers: tuple[str, ...] = ()  # admission check controllers run (Kubernetes)
    # A MultiKueueCluster whose services have not reported for this long is not Active.
    cluster_lost_s: float = 10.0
    # Kueue's waitForPodsReady is on (its Configuration, `--kueue-config`): Workloads on
    # Kubernetes carry the PodsReady condition, as Kueue's job reconciler keeps it then.
    pods_ready_condition: bool = False
    # Kueue's UnadmittedWorkloadsObservability gate (its Configuration; on by default): the
    # granular QuotaReserved reasons the watcher writes itself (PendingEvaluation, Deactivated).
    granular_reasons: bool = True
    # waitForPodsReady's back-off (its Configuration): when Workloads' requeueState says the
    # back-off after a PodsReady timeout ends.
    requeuing: RequeuingStrategy = msgspec.field(default_factory=RequeuingStrategy)
    # Kueue's admissionFairSharing (its Configuration): LocalQueues' fairSharing status.
    admission_fair_sharing: AdmissionFairSharingConfig | None = None
    # Kueue's gate ReclaimablePods (its Configuration; on by default): that status counts a
    # workload's pods less its reclaimable ones, as admission does.
    reclaimable_pods: bool = True


class KueueWriter(KueueWorkloads, StatusSink, Protocol):
    """Where a Kubernetes cluster's Kueue objects are written: `StatusWriter`."""


Put = Callable[[str, bytes], Awaitable[int]]  # a KV put: key, value -> revision


def bus_put(bus: Bus, bucket: str) -> Put:
    """A put into `bucket` through the bus's publisher: the KV protocol's put is a publish to
    `$KV.<bucket>.<key>`, and the bus's costs about half of nats-py's."""
    prefix = f"$KV.{bucket}."

    async def put(key: str, value: bytes) -> int:
        return await bus.publisher.publish_raw(prefix + key, value, {})

    return put


def bus_put_many(bus: Bus, bucket: str) -> PutMany:
    """Puts into `bucket` as `bus_put`, all in flight together (`publish_raw_many`)."""
    prefix = f"$KV.{bucket}."

    async def put_many(items: Sequence[tuple[str, bytes]]) -> Sequence[int | BusError]:
        return await bus.publisher.publish_raw_many([(prefix + k, v) for k, v in items])

    return put_many


async def load_revision(kv: Bucket, cluster: str) -> int:
    """The last cluster revision the watcher of `cluster` handled (0: never ran)."""
    entry = await kv.get(cluster)
    return 0 if entry is None else int(entry.value or b"0")


async def run_watcher(
    bus: Bus,
    health: Readiness,
    *,
    backend: ClusterBackend,
    config: WatcherConfig,
    kueue: KueueWriter | None = None,
    events: EventSink | None = None,
) -> None:
    """Publish what the cluster's changes mean, until cancelled. With `kueue` (Kubernetes),
    queued Jobs get their Kueue Workloads and a task writes the Kueue objects' statuses; with
    `events` it also records Kubernetes Events of what happens to them."""
    groups = GroupStatuses(kueue) if kueue is not None else None
    pods: dict[str, dict[str, PodState]] = {}  # the watch's view, shared with the Events
    async with SupervisedGroup() as tasks:
        workers = None
        if kueue is not None:
            workers = WorkerStatuses(kueue, lost_after_s=config.cluster_lost_s)
            tasks.create_task(workers.follow(bus), name="watcher-workers")
            book = EventBook(
                kueue_version=config.kueue_version,
                pods_of=lambda key: list(pods.get(key, {}).values()),
            )
            tasks.create_task(
                write_statuses(
                    bus,
                    kueue,
                    cluster=config.cluster,
                    kueue_version=config.kueue_version,
                    pods_ready=config.pods_ready_condition,
                    granular=config.granular_reasons,
                    requeuing=config.requeuing,
                    fair=config.admission_fair_sharing,
                    reclaimable_pods=config.reclaimable_pods,
                    groups=groups,
                    events=(book, events) if events is not None else None,
                    workers=workers,
                ),
                name="watcher-status",
            )
        tasks.create_task(
            _watch(
                bus,
                health,
                backend=backend,
                config=config,
                workloads=kueue,
                groups=groups,
                pods=pods,
                events=events,
            ),
            name="watcher-watch",
        )


async def _watch(
    bus: Bus,
    health: Readiness,
    *,
    backend: ClusterBackend,
    config: WatcherConfig,
    workloads: KueueWorkloads | None,
    groups: GroupStatuses | None = None,
    pods: dict[str, dict[str, PodState]] | None = None,
    events: EventSink | None = None,
) -> None:
    kv = await bus.kv(WATCHER_BUCKET)
    put = bus_put(bus, WATCHER_BUCKET)
    marks = KvMarks(kv, cluster=config.cluster, put_many=bus_put_many(bus, WATCHER_BUCKET))
    outbox = Outbox(bus)
    ctx = WatcherContext(
        cluster=config.cluster,
        outbox=outbox,
        marks=marks,
        workloads=workloads,
        pods=pods,
        max_event_bytes=bus.config.max_event_bytes,
    )
    poison = Quarantine(bus.publisher, consumer=f"watcher-{config.cluster}")
    refusals = Refusals()
    revision = await load_revision(kv, config.cluster)
    try:
        views = await backend.list_pods()
    except ClusterError as exc:
        if revision:
            raise  # a resumed watch needs the list (its pods' other states)
        # A cluster not reachable yet (a worker's kubeconfig wrong): the watch reports it and
        # waits for it, as before the read-back; the read-back keeps every pod's facts.
        log.warning("cluster %s: pods not listed at start (%s)", config.cluster, exc)
        views = None
    listed = [] if views is None else [s for s in map(pod_state_of_view, views) if s is not None]
    live = None if views is None else listed
    await _remember(bus, marks, live, source=ctx.source, cluster=config.cluster)
    # A resumed watch shows only what changed; the workload's other pods come from a list,
    # and so do the deletions it may never show (`resume`): of pods, and of workload objects.
    # (From revision 0 the watch lists, and what it does not show is decided gone after.)
    if revision:
        objects = await backend.list_workload_objects()
        know_owner_readiness(ctx, objects)  # before its pods are decided (`know_listed`)
        told = delete_unlisted(ctx, Listed.of(objects, listed), submitted=marks.submitted())
        if know_listed(ctx, listed, gone=marks.gone(live_of(listed))) or told:
            await outbox.flush()
            await marks.flush()
    log.info("watching cluster %s from revision %d", config.cluster, revision)
    await warn_if_unconfigured(bus, config.cluster)
    health.ready()
    saver = RevisionSaver(put, config.cluster, revision)
    saving = supervised(saver.run(), name="watcher-revision")
    # A batch in hand is watched as a consume loop's message is (bus/progress.py).
    tracker = bus.progress.track(
        "watcher-watch", stream="", consumer="", max_ack_pending=1, wording=WATCH_BATCHES
    )
    start = revision
    try:
        while True:
            # No batch for a while: the pending sets that have been still are told meanwhile.
            # A resumed watch that cannot resume ends (`lists_again`): the backend's own list
            # would never show a deletion of what the watcher knew before. One from 0 lists,
            # and what the watcher holds that its list did not show is gone (`resume`).
            listing = Listed() if start == 0 else None
            list_end = ListEnd()
            changes = batches(
                backend.watch(
                    from_revision=start,
                    lists_again=start > 0,
                    on_listed=list_end.reached if listing is not None else None,
                ),
                max_size=BATCH_MAX,
                idle_s=lambda: ctx.deferred.wait_s(now_s=ctx.monotonic_s()),
                list_end=list_end,
            )
            try:
                async for batch in changes:
                    if listing is not None:
                        for change in batch:
                            listing.show(change)
                    if batch:
                        token = batch[-1].revision
                        tracker.began(token)
                        with tracker.handling(token):
                            await _handle_batch(
                                batch, ctx, poison, groups=groups, events=events, refusals=refusals
                            )
                            # Handled, then remembered: events stored, then marks, then the
                            # revision.
                            await outbox.flush()
                            await marks.flush()
                        tracker.ended(token)
                        saver.handled(token)
                    if batch.listed and listing is not None:
                        if _settle(ctx, listing, marks):
                            await outbox.flush()
                            await marks.flush()
                        listing = None
                    # Told from the pods in hand, of no revision: a restart decides every
                    # workload with pods pending again (`WatcherContext.seed`): none is lost.
                    if decide_still(ctx):
                        await outbox.flush()
                        await marks.flush()
                    if saving.done():  # it only ends early on a bug: raise it
                        saving.result()
                    raise_if_cancelling()  # nats-py's waits may have swallowed it (bus.cancel)
                return
            except ExpiredError as err:
                log.warning("cluster %s: the watch cannot resume (%s)", config.cluster, err)
                start = 0  # a new list of everything: later expiries the backend lists itself
            finally:
                await changes.aclose()
    finally:
        tracker.close()
        # Bounded: a stop must not wait on a NATS that is gone (a crash seals nothing either).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SEAL_ON_STOP_S):
                await marks.seal()
        saver.stop()
        await saving  # the last revision handled is stored before the watcher stops


def _settle(ctx: WatcherContext, listed: Listed, marks: KvMarks) -> int:
    """A watch's list ended (`listed`: what it showed): tell each workload submitted whose
    object it did not show deleted (`delete_unlisted`), drop the pods held it did not show
    and decide their workloads, and those whose marks name a pod not there (`drop_unlisted`);
    how many workloads were told or decided."""
    told = delete_unlisted(ctx, listed, submitted=marks.submitted())
    return told + drop_unlisted(ctx, listed, gone=marks.gone)


async def _handle_batch(
    batch: Sequence[ClusterChange],
    ctx: WatcherContext,
    poison: Quarantine,
    *,
    groups: GroupStatuses | None,
    events: EventSink | None,
    refusals: Refusals | None = None,
) -> None:
    """Handle each change of `batch` in order; a run of pod changes is folded, and each
    workload it touched decided once (`FoldedPods`), before the next other change."""
    folded = FoldedPods()

    async def decide_folded() -> None:
        for last, decide in folded.take():
            await _handleuntil_done(decide, last, ctx, poison, events=events, refusals=refusals)

    for change in batch:
        if groups is not None and change.kind in GROUP_KINDS:
            groups.seen(change)  # its conditions may now be written
        if events is not None and change.kind in ("Workload", "Job", "JobSet"):
            events.learn(change.obj)  # its uid, for the Events about it
        handler = handler_for(change)
        if handler is on_pod:
            await _handleuntil_done(
                folded.fold, change, ctx, poison, events=events, refusals=refusals
            )
        elif handler is not None:
            await decide_folded()  # its pods' events go before what the object says
            await _handleuntil_done(handler, change, ctx, poison, events=events, refusals=refusals)
    await decide_folded()


async def _remember(
    bus: Bus, marks: KvMarks, listed: Sequence[PodState] | None, *, source: str, cluster: str
) -> None:
    """Load what the watcher sent before: its stored marks, then what its own pod events
    say about the pods `listed` now (None: not listed, every pod's)."""
    await marks.read_all()
    last = await bus.last_sequence()
    if not last:
        return
    live = None if listed is None else live_of(listed)
    subjects = [f for event in POD_EVENTS for f in workload_filters(cluster, event)]
    envs = bus.replay(subjects, until_sequence=last)
    read = await marks.recall(envs, source=source, live=live)
    log.info("read back %d pod events of cluster %s up to %d", read, cluster, last)


class Batch(list[ClusterChange]):
    """Changes handled together; `listed`: the watch's list ends with them (`on_listed`)."""

    listed: bool = False


class ListEnd:
    """The `on_listed` of a watch that `batches` reads: the end of its list goes into the
    batches' queue in its place among the changes (the watch calls it between two)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[ClusterChange | ListEnd | None] | None = None

    def into(self, queue: asyncio.Queue[ClusterChange | ListEnd | None]) -> None:
        self._queue = queue

    def reached(self) -> None:
        if self._queue is not None:
            self._queue.put_nowait(self)


async def batches(
    changes: AsyncGenerator[ClusterChange, None],
    *,
    max_size: int,
    idle_s: Callable[[], float | None] = lambda: None,
    list_end: ListEnd | None = None,
) -> AsyncGenerator[Batch, None]:
    """Yield `changes` in order, as many at a time as have arrived (1 to `max_size`); an
    empty batch when none arrived for `idle_s()` seconds (None: wait for one). The batch
    `list_end` (the watch's `on_listed`) was reached after is `listed`, and the last one.

    A task reads the watch meanwhile, so changes arriving while a batch is handled make the next
    batch. Ends (or raises) when the watch does, after the changes read before that.
    """
    queue: asyncio.Queue[ClusterChange | ListEnd | None] = asyncio.Queue()
    if list_end is not None:
        list_end.into(queue)  # before the watch runs: it calls `reached` from `read`

    async def read() -> None:
        try:
            async with contextlib.aclosing(changes):
                async for change in changes:
                    queue.put_nowait(change)
        finally:
            queue.put_nowait(None)  # the end; `reader` holds how it ended

    reader = asyncio.create_task(read(), name="watcher-read")
    try:
        while True:
            raise_if_cancelling()
            batch = Batch()
            try:
                async with asyncio.timeout(idle_s()):
                    item = await queue.get()
            except TimeoutError:
                yield batch
                continue
            while isinstance(item, ClusterChange):
                batch.append(item)
                if len(batch) >= max_size or queue.empty():
                    break
                item = queue.get_nowait()
            batch.listed = isinstance(item, ListEnd)
            if batch or batch.listed:
                yield batch
            if item is None:
                await reader  # raises what ended the watch
                return
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


class RevisionSaver:
    """Stores the last revision handled, at most one write in flight and one every
    `interval_s`: meanwhile later revisions only replace the next value to store.

    Every change up to a stored revision was handled and remembered (batches are handled in
    order, and its events and marks are stored before a batch's revision is handed over), so a
    restart resumes from there; one handled after it is handled again on restart, which
    republishes nothing (the marks, read back with the events, say what was sent).
    """

    def __init__(
        self, put: Put, cluster: str, revision: int, *, interval_s: float = SAVE_INTERVAL_S
    ) -> None:
        self._put = put
        self._cluster = cluster
        self._latest = revision
        self._stored = revision
        self._interval_s = interval_s
        self._dirty = asyncio.Event()
        self._stop = asyncio.Event()

    def handled(self, revision: int) -> None:
        self._latest = revision
        self._dirty.set()

    def stop(self) -> None:
        """Store what is left at once, then end `run`."""
        self._stop.set()
        self._dirty.set()

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._latest != self._stored:
                latest = self._latest
                await until_done(
                    f"saving watcher revision {latest}",
                    functools.partial(self._put, self._cluster, str(latest).encode()),
                )
                self._stored = latest
            if self._stop.is_set():
                if self._latest == self._stored:
                    return
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await self._stop.wait()


async def _handleuntil_done(
    handler: Handler,
    change: ClusterChange,
    ctx: WatcherContext,
    poison: Quarantine,
    *,
    events: EventSink | None = None,
    refusals: Refusals | None = None,
) -> None:
    """Run `handler` on `change`, retrying temporary failures until it succeeds.

    Handlers publish before they remember, so a retry republishes the same event ids and
    JetStream drops the copies. A bug (or an object no handler can take) is dead-lettered
    with its reason and the change skipped: the watch goes on. An object refused for its
    problems also gets a Warning Event saying them (`rejected_event`), with `events`: once
    per generation and problems, with `refusals`.
    """
    delay_s = 0.1
    while True:
        try:
            await handler(change, ctx)
            if refusals is not None:
                refusals.taken(change.key)
            return
        except (Retry, Unavailable, TimeoutError) as err:
            log.warning("retrying %s %s: %s", change.type, change.key, err)
        except ClusterError as err:
            if not err.temporary:
                log.error("skipping %s %s: %s", change.type, change.key, err)
                return
            log.warning("retrying %s %s: %s", change.type, change.key, err)
        except Reject as err:  # an object no handler can take, the problems said: no traceback
            if refusals is not None and not refusals.first(change, str(err)):
                return  # told already: a status or label change of the object refused
            await poison.object(change.key, change.obj, str(err), revision=change.revision)
            if events is not None and change.type != "DELETED":
                events.record(reference_of(change.obj), **rejected_event(change.obj, str(err)))
            return
        except Exception as err:
            await poison.object(change.key, change.obj, err, revision=change.revision)
            return
        # Each failed try is an answer: slow (a busy API server, JetStream without a leader),
        # not stalled (bus/progress.py); a try that never returns is.
        advanced()
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 5.0)
