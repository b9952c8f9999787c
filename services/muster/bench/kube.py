"""`muster bench kube`: the Kubernetes boundary against the API-server stand-in.

The stand-in runs as its own process (`python -m muster.devtools.apiserver`), so the client
side measured here does not share an interpreter with the server. Rows:
- watch-list: `KubeBackend.watch` from nothing, until every pod is shown (paged lists decoded
  by msgspec, merged and deduplicated: each pod is in both pod selections);
- watch-stream: a watch resumed from the last revision while every pod changed once, until
  every change is shown (watch event lines decoded by msgspec);
- status-writes: `StatusWriter` keeping the status of N ClusterQueues, each desired several
  times, at a configured QPS (0: unlimited): writes/s achieved and desires per write;
- event-writes: `EventRecorder` recording the same Pending Event of N Workloads round after
  round (a workload waiting for quota), unlimited: Events recorded against API writes sent
  (each Workload's Event, then its series when it starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import msgspec

from muster.bench.table import Column, number, render_table
from muster.cluster.backend import ClusterChange
from muster.cluster.kube import (
    KubeBackend,
    KubeConfig,
    ObjectRef,
    StatusWriter,
    StatusWriterSettings,
    WatchSettings,
)
from muster.cluster.kube.events import EventRecorder, EventSettings
from muster.cluster.kube.informer import SEQ_BITS, current_resource_version
from muster.cluster.kube.references import Reference
from muster.cluster.kube.transport import MERGE_PATCH
from muster.launcher.lifeline import tied_to_launcher
from muster.watcher.kube_events import ADMISSION

SECTION = "kube"
IN_FLIGHT = 64  # concurrent writes while filling the stand-in
DESIRES_PER_OBJECT = 5
PENDING_ROUNDS = 20  # event-writes: Pending Events recorded per Workload
STATUS_QPS = (50.0, 200.0, 0.0)


class KubeRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    measure: str  # "watch-list", "watch-stream", "status-writes" or "event-writes"
    objects: int  # pods watched, ClusterQueues whose status is written, Workloads told about
    events: int  # watch lines decoded, or status or Event writes sent
    shown: int  # changes the watch yielded, desire() calls, or Events recorded
    seconds: float
    per_s: float  # events (watch) or writes (status, Events) per second
    qps_limit: float | None = None  # status-writes: the configured rate, 0 = unlimited


@contextlib.asynccontextmanager
async def standin(*, history: int, job_controller: bool = False) -> AsyncIterator[str]:
    """The stand-in in a child process (with its Job controller, when told); yields its URL."""
    argv = [
        sys.executable,
        *("-m", "muster.devtools.apiserver", "--port", "0"),
        *("--history", str(history), "--bookmark-interval", "0.5"),
        *(["--job-controller"] if job_controller else []),
    ]
    proc = await asyncio.create_subprocess_exec(*tied_to_launcher(argv), stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        yield line.decode().strip().rsplit(" ", 1)[-1]
    finally:
        proc.terminate()
        await proc.wait()


def _config(url: str, *, write_qps: float = 0.0) -> KubeConfig:
    return KubeConfig(host=url, write_qps=write_qps, watch=WatchSettings(page_size=500))


def _pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p-{i:06d}",
            "namespace": "default",
            "labels": {"muster.dev/workload": f"w-{i // 4}"},
            "annotations": {"muster.dev/pod-set": "main"},
        },
        "spec": {
            "schedulerName": "muster",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


async def _gather_bounded(jobs: list[Any]) -> None:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(job: Any) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


async def _watch_until(
    backend: KubeBackend, count: int, *, from_revision: int, done: Callable[[ClusterChange], bool]
) -> tuple[int, int, float, int]:
    """(changes shown, lines decoded, seconds, last revision) until `count` pods are `done`."""
    lines_before = backend.transport.watch_lines
    finished: set[str] = set()
    shown, last = 0, from_revision
    started = time.perf_counter()
    changes = backend.watch(from_revision=from_revision)
    async with contextlib.aclosing(changes):
        async for change in changes:
            shown += 1
            last = change.revision
            if change.kind == "Pod" and done(change):
                finished.add(change.key)
                if len(finished) >= count:
                    break
    seconds = time.perf_counter() - started
    return shown, backend.transport.watch_lines - lines_before, seconds, last


def _changed(change: ClusterChange) -> bool:
    return bool(change.obj["metadata"].get("labels", {}).get("bench"))


async def watch_rows(pods: int) -> list[KubeRow]:
    async with standin(history=4 * pods + 1000) as url:
        backend = await KubeBackend.connect(_config(url))
        try:
            await _gather_bounded([backend.create(_pod(i)) for i in range(pods)])
            shown, lines, seconds, _ = await _watch_until(
                backend, pods, from_revision=0, done=lambda c: c.type == "ADDED"
            )
            listed = KubeRow(
                measure="watch-list",
                objects=pods,
                events=2 * pods,  # each pod is listed by both pod sources
                shown=shown,
                seconds=seconds,
                per_s=2 * pods / seconds,
            )
            # A revision's floor is a resourceVersion everything before which was handled:
            # resuming from "now" streams exactly the changes made next, from the history.
            now = await current_resource_version(backend.transport)
            await _gather_bounded([_touch(backend, i) for i in range(pods)])
            shown, lines, seconds, _ = await _watch_until(
                backend, pods, from_revision=now << SEQ_BITS, done=_changed
            )
            streamed = KubeRow(
                measure="watch-stream",
                objects=pods,
                events=lines,
                shown=shown,
                seconds=seconds,
                per_s=lines / seconds,
            )
        finally:
            await backend.close()
    return [listed, streamed]


async def _touch(backend: KubeBackend, i: int) -> None:
    pod = _pod(i)["metadata"]
    await backend.transport.checked(
        "PATCH",
        f"/api/v1/namespaces/default/pods/{pod['name']}",
        obj=pod["name"],
        body={"metadata": {"labels": {"bench": "changed"}}},
        content_type=MERGE_PATCH,
    )


def _queue_status(round_: int) -> dict[str, Any]:
    usage = [
        {"name": "default", "resources": [{"name": "cpu", "total": str(round_), "borrowed": "0"}]}
    ]
    return {
        "pendingWorkloads": round_,
        "reservingWorkloads": 1,
        "admittedWorkloads": 1,
        "flavorsReservation": usage,
        "flavorsUsage": usage,
        "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "ok"}],
    }


async def status_row(queues: int, *, qps: float) -> KubeRow:
    async with standin(history=10 * queues + 1000) as url:
        backend = await KubeBackend.connect(_config(url))
        try:
            manifests = [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "ClusterQueue",
                    "metadata": {"name": f"cq-{q}"},
                    "spec": {"namespaceSelector": {}},
                }
                for q in range(queues)
            ]
            await _gather_bounded([backend.create(m) for m in manifests])
            settings = StatusWriterSettings(qps=qps, burst=max(1, int(qps // 10)), concurrency=8)
            writer = StatusWriter(backend.transport, settings=settings)
            started = time.perf_counter()
            for round_ in range(DESIRES_PER_OBJECT):
                for q in range(queues):
                    writer.desire(
                        ObjectRef(kind="ClusterQueue", name=f"cq-{q}"), _queue_status(round_)
                    )
                await asyncio.sleep(0)  # let writers start between rounds, as decisions trickle in
            await writer.flush(timeout_s=600)
            seconds = time.perf_counter() - started
            await writer.close()
            return KubeRow(
                measure="status-writes",
                objects=queues,
                events=writer.stats.writes,
                shown=writer.stats.desired,
                seconds=seconds,
                per_s=writer.stats.writes / seconds,
                qps_limit=qps,
            )
        finally:
            await backend.close()


async def event_row(workloads: int) -> KubeRow:
    async with standin(history=10 * workloads + 1000) as url:
        backend = await KubeBackend.connect(_config(url))
        try:
            await backend.create({"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": "ml"}})  # fmt: skip
            settings = EventSettings(qps=0.0, queue_size=workloads * PENDING_ROUNDS)
            recorder = EventRecorder(backend.transport, controller=ADMISSION, settings=settings)
            started = time.perf_counter()
            for _ in range(PENDING_ROUNDS):
                for w in range(workloads):
                    regarding = Reference(
                        api_version="kueue.x-k8s.io/v1beta1", kind="Workload", namespace="ml",
                        name=f"wl-{w}", uid=f"uid-{w}",
                    )  # fmt: skip
                    note = "couldn't assign flavors: insufficient unused quota for cpu"
                    recorder.record(
                        regarding, type_="Warning", reason="Pending", note=note, action="Pending"
                    )
                await asyncio.sleep(0)  # rounds come one after another
            await recorder.flush(timeout_s=600)
            seconds = time.perf_counter() - started
            await recorder.close()
            return KubeRow(
                measure="event-writes",
                objects=workloads,
                events=recorder.written,
                shown=workloads * PENDING_ROUNDS,
                seconds=seconds,
                per_s=recorder.written / seconds,
                qps_limit=0.0,
            )
        finally:
            await backend.close()


def run_kube_bench(
    *, scale: float = 1.0, status_qps: tuple[float, ...] = STATUS_QPS
) -> list[KubeRow]:
    """Every row of the section (see the module docstring), at `scale` of the default sizes."""
    return list(run(scale=scale, status_qps=status_qps))


def run(*, scale: float, status_qps: tuple[float, ...] = STATUS_QPS) -> Iterator[KubeRow]:
    pods = max(100, round(5000 * scale))
    queues = max(20, round(200 * scale))
    yield from asyncio.run(watch_rows(pods))
    for qps in status_qps:
        yield asyncio.run(status_row(queues, qps=qps))
    yield asyncio.run(event_row(queues))


def render(rows: list[KubeRow]) -> str:
    columns: list[Column[KubeRow]] = [
        Column("MEASURE", lambda r: r.measure, numeric=False),
        Column("OBJECTS", lambda r: str(r.objects)),
        Column("QPS LIMIT", _qps_cell),
        Column("EVENTS/WRITES", lambda r: str(r.events)),
        Column("SHOWN/DESIRED", lambda r: str(r.shown)),
        Column("SECONDS", lambda r: number(r.seconds)),
        Column("PER SECOND", lambda r: number(r.per_s, digits=0)),
    ]
    return render_table(columns, rows)


def _qps_cell(row: KubeRow) -> str:
    if row.qps_limit is None:
        return "-"
    return number(row.qps_limit) if row.qps_limit > 0 else "none"
