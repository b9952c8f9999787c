"""The watcher on the Kubernetes backend, against the API-server stand-in: resumed after a
restart, its watch then cut while a pod is deleted and the history compacted, so the watch
gets 410 Gone. Its resumed watch ends expired (`lists_again`), and the watcher lists the pods
and drops the one gone: its group, whose other pod succeeded, is told finished. Before, the
backend listed again itself, and had never shown that pod (the watcher knew it from its
start's list): no deletion came, and the group stayed Running for ever. Also the same gap
while the watcher was stopped (its resume at start gets 410). And a queued Job deleted in
either gap (task jobdelete410): the watcher lists the workload objects too, and tells the
Job's workload deleted, with the id its watched deletion has; before, no `workload.deleted`
came, and admission kept its quota for ever."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from budget import wait_s
from kube_backend_helpers import backend_for, bare_workload, fast_config, job, pod
from kube_services_helpers import Events

from muster.api.ids import uuid5_text
from muster.bus import Bus, BusConfig, connect
from muster.bus.buckets import WATCHER_BUCKET
from muster.cluster.backend import ClusterBackend, ClusterChange
from muster.cluster.kube import KubeBackend
from muster.devtools.apiserver import ApiServer
from muster.launcher.nats_server import NatsServer
from muster.watcher import translate
from muster.watcher.handlers import WATCHER_ID_NAMESPACE
from muster.watcher.service import WatcherConfig, run_watcher

pytestmark = pytest.mark.timeout(60)

GROUP = "default/w"
GROUP_RUNNING = (GROUP, "workload.running")


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[Bus]:
    nats = NatsServer(tmp_path / "nats")
    url = await nats.start(log_path=tmp_path / "nats.log")
    try:
        connected = await connect(BusConfig(url=url, name="muster-test", connect_timeout_s=5.0))
        await connected.ensure_streams()
        try:
            yield connected
        finally:
            await connected.close()
    finally:
        await nats.stop()


class Ready:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def ready(self) -> None:
        self.event.set()


@contextlib.asynccontextmanager
async def watcher(bus: Bus, backend: ClusterBackend) -> AsyncIterator[None]:
    """The watcher of cluster "local" running until the block ends (then it stores the
    revision it handled)."""
    ready = Ready()
    config = WatcherConfig(cluster="local")
    task = asyncio.create_task(run_watcher(bus, ready, backend=backend, config=config))
    waiting = asyncio.create_task(ready.event.wait())
    await asyncio.wait({task, waiting}, timeout=wait_s(None), return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()  # it died: show why
    # Else a watcher still starting went on as ready, and the test's writes raced its lists.
    assert ready.event.is_set(), "the watcher was not ready in the test's time"
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def set_phase(server: ApiServer, name: str, phase: str) -> None:
    """What the kubelet writes: the phase, Ready while it runs."""
    pods = server.registry.by_key(("", "pods"))
    assert pods is not None
    ready = {"type": "Ready", "status": str(phase == "Running")}
    status: dict[str, Any] = {"status": {"phase": phase, "conditions": [ready]}}
    server.api.patch(
        pods, "v1", "default", name, "application/merge-patch+json", status, subresource="status"
    )


async def running(server: ApiServer, backend: KubeBackend, name: str, workload: str) -> None:
    await backend.apply(pod(name, workload=workload, nodeName="n1"))
    set_phase(server, name, "Running")


async def handled(server: ApiServer, backend: KubeBackend, events: Events, name: str) -> None:
    """Return once the watcher told workload default/`name` running: changes are handled in
    order, so every change before it was handled too."""
    await running(server, backend, name, name)
    await events.wait_for(f"default/{name}", "workload.running")


async def resumed_after_bookmarks(
    server: ApiServer, backend: KubeBackend, bus: Bus, *, told: tuple[str, str]
) -> Events:
    """The events, followed; a first watcher life that told `told` (workload, event type),
    then saw every source past it (bookmarks) and handled a change: the revision it stored is
    past what it saw, so the next watcher resumes there instead of listing again."""
    events = Events(bus)
    events.start()
    async with watcher(bus, backend):
        await events.wait_for(*told)
        server.send_bookmarks()
        await handled(server, backend, events, "s-0")
    return events


async def deleted_while_cut(
    server: ApiServer, backend: KubeBackend, kind: str, name: str, *, watch_path: str
) -> None:
    """Away: the watches cut, those of `watch_path` refused, while `name` goes and history
    with it; then the watches may resume, and the refused one gets 410 Gone."""
    server.faults.fail_next(10_000, status=503, verb="watch", path=watch_path)
    server.drop_watches()
    await backend.delete(kind, name, namespace="default")
    server.compact()
    server.faults.clear()


async def test_a_pod_deleted_while_a_resumed_watch_was_cut_and_compacted_ends_its_group(
    server: ApiServer, backend: KubeBackend, bus: Bus
) -> None:
    await running(server, backend, "w-0", "w")
    await running(server, backend, "w-1", "w")
    events = await resumed_after_bookmarks(server, backend, bus, told=GROUP_RUNNING)
    async with watcher(bus, backend):  # resumed: it knows w-1 from its start's list only
        set_phase(server, "w-0", "Succeeded")
        await handled(server, backend, events, "t-0")  # and so w-0's end before it

        await deleted_while_cut(server, backend, "Pod", "w-1", watch_path=r"/pods$")

        await events.wait_for(GROUP, "workload.finished")
    (finished,) = events.of(GROUP, "workload.finished")
    assert finished.finished.succeeded
    assert finished.finished.message == "1 of 1 pods succeeded"
    assert len(events.of(GROUP, "workload.running")) == 1
    await events.stop()


async def test_a_pod_deleted_while_the_watcher_was_stopped_and_history_compacted_ends_its_group(
    server: ApiServer, backend: KubeBackend, bus: Bus
) -> None:
    await running(server, backend, "w-0", "w")
    await running(server, backend, "w-1", "w")
    events = await resumed_after_bookmarks(server, backend, bus, told=GROUP_RUNNING)
    set_phase(server, "w-0", "Succeeded")
    await backend.delete("Pod", "w-1", namespace="default")
    server.compact()  # the restarted watcher's resume gets 410
    async with watcher(bus, backend):
        await events.wait_for(GROUP, "workload.finished")
    (finished,) = events.of(GROUP, "workload.finished")
    assert finished.finished.succeeded
    assert finished.finished.message == "1 of 1 pods succeeded"
    await events.stop()


class DeletingAsItWatches:
    """`inner`, where pod `doomed` is deleted as the first watch begins: after the watcher's
    own list at its start, before any list of the watch."""

    def __init__(self, inner: KubeBackend, doomed: str) -> None:
        self.inner = inner
        self.doomed = doomed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def watch(self, **options: Any) -> AsyncGenerator[ClusterChange, None]:
        if self.doomed:
            await self.inner.delete("Pod", self.doomed, namespace="default")
            self.doomed = ""
        async for change in self.inner.watch(**options):
            yield change


async def test_a_pod_deleted_as_a_watcher_stopped_inside_its_first_list_resumes_ends_its_group(
    server: ApiServer, backend: KubeBackend, bus: Bus
) -> None:
    await running(server, backend, "w-0", "w")
    await running(server, backend, "w-1", "w")
    set_phase(server, "w-0", "Succeeded")
    events = await resumed_after_bookmarks(server, backend, bus, told=GROUP_RUNNING)
    # A revision from inside the first watch's list (before every source had listed): its
    # resume lists again, and the watcher's own list at start still showed w-1.
    await (await bus.kv(WATCHER_BUCKET)).put("local", b"5")
    deleting = DeletingAsItWatches(backend, "w-1")
    async with watcher(bus, cast(ClusterBackend, deleting)):
        await events.wait_for(GROUP, "workload.finished")
    (finished,) = events.of(GROUP, "workload.finished")
    assert finished.finished.message == "1 of 1 pods succeeded"
    await events.stop()


def deletion_id(server: ApiServer, name: str) -> tuple[str, str]:
    """Job `name`'s workload, and the id of the `deleted` its watched deletion would have."""
    jobs = server.registry.by_key(("batch", "jobs"))
    assert jobs is not None
    wl, _ = translate.workload_of(server.api.get(jobs, "default", name))
    assert wl is not None
    fact = f"local/{wl.key}/deleted/{translate.incarnation(wl)}"
    return wl.key, uuid5_text(WATCHER_ID_NAMESPACE, fact)


@contextlib.asynccontextmanager
async def jobs_j_and_k(
    server: ApiServer, backend: KubeBackend, bus: Bus
) -> AsyncIterator[tuple[Events, str]]:
    """Jobs j and k submitted by a watcher that then stopped (its revision past them): the
    block deletes j in some gap; then j alone was told deleted, with its watched deletion's
    id. Yields the events and j's workload."""
    await backend.apply(job("j"))
    await backend.apply(job("k"))
    key, deleted_id = deletion_id(server, "j")
    other, _ = deletion_id(server, "k")
    events = await resumed_after_bookmarks(server, backend, bus, told=(key, "workload.submitted"))
    yield events, key
    assert [e.event_id for e in events.of(key, "workload.deleted")] == [deleted_id]
    assert not events.of(other, "workload.deleted")  # still there: not told deleted
    assert len(events.of(other, "workload.submitted")) == 1
    await events.stop()


async def test_a_job_deleted_while_the_watcher_was_stopped_and_history_compacted_is_deleted(
    server: ApiServer, backend: KubeBackend, bus: Bus
) -> None:
    async with jobs_j_and_k(server, backend, bus) as (events, key):
        await backend.delete("Job", "j", namespace="default")
        server.compact()  # the restarted watcher's resume gets 410
        async with watcher(bus, backend):
            await events.wait_for(key, "workload.deleted")


async def test_a_job_deleted_while_a_resumed_watch_was_cut_and_compacted_is_deleted(
    server: ApiServer, backend: KubeBackend, bus: Bus
) -> None:
    async with jobs_j_and_k(server, backend, bus) as (events, key), watcher(bus, backend):
        await handled(server, backend, events, "t-0")  # resumed, and watching
        await deleted_while_cut(server, backend, "Job", "j", watch_path=r"/jobs$")

        await events.wait_for(key, "workload.deleted")
        await handled(server, backend, events, "u-0")  # what came after j's deletion, handled


async def test_the_workload_objects_are_listed_as_the_watch_selects_them_in_pages(
    server: ApiServer,
) -> None:
    watch = msgspec.structs.replace(fast_config(server.url).watch, page_size=2)
    async with backend_for(server, watch=watch) as backend:
        for i in range(5):
            await backend.apply(job(f"j{i}"))
        await backend.apply(job("unqueued", queue=None))  # the watch does not show it either
        await backend.apply(bare_workload("wl"))
        listed = await backend.list_workload_objects()
    names = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in listed)
    assert names == [*(f"Job/j{i}" for i in range(5)), "Workload/wl"]
    assert server.requests.count(verb="list", path=r"/jobs$") == 3  # 2 + 2 + 1
