"""Helpers for the KubeBackend tests: a backend tuned for fast tests against an `ApiServer`
on the test's own event loop, and `ChangeLog`, which follows `backend.watch` in a task so a
test can write and then wait for what the watch shows (never sleeping)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from budget import wait_s

from muster.cluster.backend import ClusterChange, Selection
from muster.cluster.kube import Backoff, KubeBackend, KubeConfig, WatchSettings, floor_of
from muster.devtools.apiserver import ApiServer

FAST_RETRY = Backoff(initial_s=0.01, max_s=0.05, attempts=6)


def fast_config(url: str, **overrides: Any) -> KubeConfig:
    """A config for `url` whose retries, back-offs and CRD re-checks take milliseconds."""
    settings = {
        "host": url,
        "watch": WatchSettings(missing_retry_s=0.05, backoff=Backoff(initial_s=0.01, max_s=0.05)),
        "retry": FAST_RETRY,
        **overrides,
    }
    return KubeConfig(**settings)


@contextlib.asynccontextmanager
async def backend_for(server: ApiServer, **overrides: Any) -> AsyncIterator[KubeBackend]:
    backend = await KubeBackend.connect(fast_config(server.url, **overrides))
    try:
        yield backend
    finally:
        await backend.close()


class ChangeLog:
    """Every change `backend.watch(from_revision=...)` yields, in order, gathered by a task."""

    def __init__(
        self, backend: KubeBackend, *, from_revision: int = 0, selection: Selection = "workloads"
    ) -> None:
        self.changes: list[ClusterChange] = []
        self.progress = 0  # the highest revision `on_progress` reported
        self.listed_at: list[int] = []  # how many changes had come at each `on_listed`
        self._changes = backend.watch(
            from_revision=from_revision,
            selection=selection,
            on_progress=self._progressed,
            on_listed=lambda: self.listed_at.append(len(self.changes)),
        )
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ChangeLog:
        self._task = asyncio.create_task(self._follow())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._changes.aclose()

    def _progressed(self, revision: int) -> None:
        self.progress = max(self.progress, revision)
        self._arrived.set()

    async def _follow(self) -> None:
        async for change in self._changes:
            self.changes.append(change)
            self._arrived.set()

    async def wait_for(
        self,
        predicate: Callable[[ClusterChange], bool],
        *,
        timeout_s: float | None = None,
        start: int = 0,
    ) -> ClusterChange:
        """The first change from index `start` on that matches, waiting for it if need be
        (`timeout_s` None: the rest of the test's time, `tests/budget.py`)."""
        async with asyncio.timeout(wait_s(timeout_s)):
            index = start
            while True:
                while index < len(self.changes):
                    if predicate(self.changes[index]):
                        return self.changes[index]
                    index += 1
                self._arrived.clear()
                await self._arrived.wait()

    async def wait_progress(self, revision: int, *, timeout_s: float | None = None) -> None:
        """Return once `on_progress` has reported `revision` (or later)."""
        async with asyncio.timeout(wait_s(timeout_s)):
            while self.progress < revision:
                self._arrived.clear()
                await self._arrived.wait()

    async def caught_up(self, server: ApiServer, backend: KubeBackend) -> None:
        """Return once the watch reports progress past every write made before the call (for a
        selection without Namespaces, where `barrier` cannot create one to wait for)."""
        target = await backend.current_revision()
        async with asyncio.timeout(wait_s(None)):
            while self.progress < target:
                server.send_bookmarks()
                with contextlib.suppress(TimeoutError):
                    await self.wait_progress(target, timeout_s=0.2)

    async def wait_key(self, key: str, type_: str, *, start: int = 0) -> ClusterChange:
        return await self.wait_for(lambda c: c.key == key and c.type == type_, start=start)

    async def barrier(self, server: ApiServer, backend: KubeBackend) -> None:
        """Return once every source has delivered all that was written before the call: a
        change shows a floor past that point (bookmarks move idle sources along)."""
        target = server.store.rv
        while True:
            server.send_bookmarks()
            name = f"barrier-{server.store.rv}"  # unique: every create moves the rv
            await backend.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
            shown = await self.wait_key(f"obj.Namespace._.{name}", "ADDED")
            if floor_of(shown.revision) >= target:
                return

    def about(self, key: str) -> list[tuple[str, str]]:
        """(type, resourceVersion) of every change of `key`."""
        return [
            (c.type, c.obj["metadata"]["resourceVersion"]) for c in self.changes if c.key == key
        ]


def pod(
    name: str,
    *,
    scheduler: str = "muster",
    workload: str = "",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    labels = {**(labels or {}), **({"muster.dev/workload": workload} if workload else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "busybox:1.36"}],
            **spec,
        },
    }


def relabel(server: ApiServer, name: str, labels: dict[str, str]) -> None:
    """Merge `labels` into pod default/<name> (a pod's spec cannot be replaced)."""
    pods = server.registry.by_key(("", "pods"))
    assert pods is not None
    patch = {"metadata": {"labels": labels}}
    server.api.patch(pods, "v1", "default", name, "application/merge-patch+json", patch)


def node(name: str, *, cpu: str = "8", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"capacity": {"cpu": cpu}, "allocatable": {"cpu": cpu}},
    }


def bare_workload(name: str = "wl", *, count: int = 2) -> dict[str, Any]:
    """A Kueue Workload of its own (no Job): muster makes its pods from its podset template."""
    template = {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "queueName": "lq",
            "podSets": [{"name": "main", "count": count, "template": template}],
        },
    }


def job(name: str, *, queue: str | None = "lq", parallelism: int = 3) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "suspend": True,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"disk": "ssd"},
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                },
            },
        },
    }
