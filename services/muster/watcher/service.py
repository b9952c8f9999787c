"""The watcher service: follows one cluster's objects and publishes what they mean; on
Kubernetes it also writes the status of the cluster's Kueue objects (`status`).

Resumes the cluster watch after the last revision it handled (KV `MUSTER_WATCHER`, key
`<cluster>`); what it sent per workload lives in the same bucket (`<cluster>.wl.<ns>.<name>`),
so a restart neither loses nor repeats a fact.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

import msgspec
import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from muster.bus.connection import Bus
from muster.bus.errors import Retry
from muster.cluster.backend import ClusterBackend, ClusterChange
from muster.cluster.errors import ClusterError
from muster.watcher.handlers import Handler, KueueWorkloads, WatcherContext, handler_for
from muster.watcher.pods import Sent, pod_state_of_view
from muster.watcher.status import StatusSink, write_statuses

log = logging.getLogger(__name__)

WATCHER_BUCKET = "MUSTER_WATCHER"


class Readiness(Protocol):
    def ready(self) -> None: ...


class WatcherConfig(msgspec.Struct, frozen=True, kw_only=True):
    cluster: str
    kueue_version: str = "v1beta1"  # the shape of LocalQueue statuses written (Kubernetes)


class KueueWriter(KueueWorkloads, StatusSink, Protocol):
    """Where a Kubernetes cluster's Kueue objects are written: `StatusWriter`."""


class KvMarks:
    """`MarksStore` over the `MUSTER_WATCHER` bucket, with an in-memory cache."""

    def __init__(self, kv: KeyValue, *, cluster: str) -> None:
        self._kv = kv
        self._cluster = cluster
        self._cache: dict[str, Sent] = {}

    def _key(self, workload: str) -> str:
        namespace, _, name = workload.partition("/")
        return f"{self._cluster}.wl.{namespace}.{name}"

    async def load(self, workload: str) -> Sent:
        cached = self._cache.get(workload)
        if cached is not None:
            return cached
        try:
            entry = await self._kv.get(self._key(workload))
        except nats.js.errors.KeyNotFoundError:
            sent = Sent()
        else:
            sent = msgspec.json.decode(entry.value or b"{}", type=Sent)
        self._cache[workload] = sent
        return sent

    async def save(self, workload: str, sent: Sent) -> None:
        key = self._key(workload)
        if sent.empty:
            self._cache.pop(workload, None)
            with contextlib.suppress(nats.js.errors.KeyNotFoundError):
                await self._kv.delete(key)
            return
        self._cache[workload] = sent
        await self._kv.put(key, msgspec.json.encode(sent))


async def load_revision(kv: KeyValue, cluster: str) -> int:
    """The last cluster revision the watcher of `cluster` handled (0: never ran)."""
    try:
        entry = await kv.get(cluster)
    except nats.js.errors.KeyNotFoundError:
        return 0
    return int(entry.value or b"0")


async def run_watcher(
    bus: Bus,
    health: Readiness,
    *,
    backend: ClusterBackend,
    config: WatcherConfig,
    kueue: KueueWriter | None = None,
) -> None:
    """Publish what the cluster's changes mean, until cancelled. With `kueue` (Kubernetes),
    queued Jobs get their Kueue Workloads and a task writes the Kueue objects' statuses."""
    async with asyncio.TaskGroup() as tasks:
        if kueue is not None:
            tasks.create_task(
                write_statuses(
                    bus, kueue, cluster=config.cluster, kueue_version=config.kueue_version
                ),
                name="watcher-status",
            )
        tasks.create_task(
            _watch(bus, health, backend=backend, config=config, workloads=kueue),
            name="watcher-watch",
        )


async def _watch(
    bus: Bus,
    health: Readiness,
    *,
    backend: ClusterBackend,
    config: WatcherConfig,
    workloads: KueueWorkloads | None,
) -> None:
    kv = await bus.kv(WATCHER_BUCKET)
    marks = KvMarks(kv, cluster=config.cluster)
    ctx = WatcherContext(cluster=config.cluster, publisher=bus, marks=marks, workloads=workloads)
    revision = await load_revision(kv, config.cluster)
    if revision:
        # A resumed watch shows only what changed; the workload's other pods come from a list.
        for pod in await backend.list_pods():
            state = pod_state_of_view(pod)
            if state is not None:
                ctx.seed(state)
    log.info("watching cluster %s from revision %d", config.cluster, revision)
    health.ready()
    saver = RevisionSaver(kv, config.cluster, revision)
    changes = backend.watch(from_revision=revision)
    saving = asyncio.create_task(saver.run(), name="watcher-revision")
    try:
        async for change in changes:
            handler = handler_for(change)
            if handler is not None:
                await _handle_until_done(handler, change, ctx)
            saver.handled(change.revision)
            if saving.done():  # it only ends early on a bug: raise it
                saving.result()
    finally:
        saver.stop()
        try:
            await saving  # the last revision handled is stored before the watcher stops
        finally:
            close = getattr(changes, "aclose", None)
            if close is not None:
                await close()


class RevisionSaver:
    """Stores the last revision handled, at most one write in flight: while one is stored,
    later revisions only replace the next value to store.

    Every change up to a stored revision was handled (changes are handled in order), so a
    restart resumes from there; one handled after it is handled again on restart, which
    republishes nothing (the marks say what was sent, and JetStream drops duplicate ids).
    """

    def __init__(self, kv: KeyValue, cluster: str, revision: int) -> None:
        self._kv = kv
        self._cluster = cluster
        self._latest = revision
        self._stored = revision
        self._dirty = asyncio.Event()
        self._stopping = False

    def handled(self, revision: int) -> None:
        self._latest = revision
        self._dirty.set()

    def stop(self) -> None:
        """Store what is left, then end `run`."""
        self._stopping = True
        self._dirty.set()

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._latest != self._stored:
                latest = self._latest
                await _save_revision(self._kv, self._cluster, latest)
                self._stored = latest
            if self._stopping and self._latest == self._stored:
                return


async def _handle_until_done(handler: Handler, change: ClusterChange, ctx: WatcherContext) -> None:
    """Run `handler` on `change`, retrying temporary failures until it succeeds.

    Handlers publish before they remember, so a retry republishes the same event ids and
    JetStream drops the copies. A bug is logged and the change skipped: the watch goes on.
    """
    delay_s = 0.1
    while True:
        try:
            await handler(change, ctx)
            return
        except (Retry, nats.errors.Error, TimeoutError) as err:
            log.warning("retrying %s %s: %s", change.type, change.key, err)
        except ClusterError as err:
            if not err.temporary:
                log.error("skipping %s %s: %s", change.type, change.key, err)
                return
            log.warning("retrying %s %s: %s", change.type, change.key, err)
        except Exception:
            log.exception("handler failed on %s %s; skipping it", change.type, change.key)
            return
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 5.0)


async def _save_revision(kv: KeyValue, cluster: str, revision: int) -> None:
    delay_s = 0.1
    while True:
        try:
            await kv.put(cluster, str(revision).encode())
            return
        except (nats.errors.Error, TimeoutError) as err:
            log.warning("cannot save watcher revision %d: %r; retrying", revision, err)
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, 5.0)
