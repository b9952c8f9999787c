"""Gang-permit's view of its cluster: one watch of the backend (`selection="placement"`: the
simulated store, or the API server's nodes, the pods to place and every bound pod), decoded into
api objects.

Nodes, Pods, scheduling.k8s.io Workloads, PodGroups and PriorityClasses are decoded once per
change (`muster.api`) and handed to a `Sink` (the gangpermit state) as they are now, or as they
were when deleted. `sync` waits until the watch has shown every write made before the call, so
a first pass sees the whole cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from muster.api import decode_documents
from muster.api.model import Node, Pod, PodGroup, PriorityClass, SchedulingWorkload
from muster.cluster.backend import ClusterBackend, ClusterChange
from muster.cluster.errors import ClusterError
from muster.cluster.sim.keys import (
    NODE_PREFIX,
    OBJECT_PREFIX,
    POD_PREFIX,
    SCHEDULING_WORKLOAD_KIND,
    escape,
)

log = logging.getLogger(__name__)

_RETRY_S = 1.0  # a watch that failed is resumed after this long
# Keys of the objects placement reads (both backends key changes alike); everything else is
# skipped undecoded.
WATCHED_PREFIXES = (
    NODE_PREFIX,
    POD_PREFIX,
    *(
        f"{OBJECT_PREFIX}{escape(kind)}."
        for kind in (SCHEDULING_WORKLOAD_KIND, "PodGroup", "PriorityClass")
    ),
)

CachedObject = Node | Pod | SchedulingWorkload | PodGroup | PriorityClass
_CACHED = (Node, Pod, SchedulingWorkload, PodGroup, PriorityClass)


class Sink(Protocol):
    def put(self, obj: CachedObject) -> None: ...

    def remove(self, obj: CachedObject) -> None: ...


class ClusterCache:
    """Follows one cluster's backend into a `Sink`. Run `run()` in a task; `on_change` is
    called after each change handed on (the service wakes its passes)."""

    def __init__(
        self,
        backend: ClusterBackend,
        *,
        sink: Sink,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._backend = backend
        self._sink = sink
        self._on_change = on_change
        self._objects: dict[str, CachedObject] = {}  # by change key: what the sink holds
        self.revision = 0  # the watch has shown every change up to here
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []  # (revision, woken there)

    async def run(self) -> None:
        """Follow the cluster until cancelled; a failed watch resumes after the last revision."""
        while True:
            changes = self._backend.watch(
                from_revision=self.revision, selection="placement", on_progress=self._read_up_to
            )
            try:
                async with contextlib.aclosing(changes):
                    async for change in changes:
                        self.apply(change)
                        self._read_up_to(change.revision)
            except ClusterError as err:
                log.warning("cluster watch failed, resuming: %s", err)
                await asyncio.sleep(_RETRY_S)

    async def sync(self, *, timeout_s: float = 5.0) -> None:
        """Return once the cache holds every write made before this call (ClusterError if the
        watch does not get there within `timeout_s`)."""
        target: int | None = None
        waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout_s):
                target = await self._backend.current_revision()
                if self.revision >= target:
                    return
                self._waiters.append((target, waiter))
                await waiter
        except TimeoutError:
            behind = "" if target is None else f", behind {target}"
            raise ClusterError(
                "",
                "Unavailable",
                f"cluster watch at revision {self.revision}{behind} after {timeout_s:g}s",
                temporary=True,
            ) from None
        finally:
            if target is not None and (target, waiter) in self._waiters:
                self._waiters.remove((target, waiter))

    def apply(self, change: ClusterChange) -> None:
        """Hand one change on to the sink (a watched kind only)."""
        key = change.key
        if not key.startswith(WATCHED_PREFIXES):
            return
        if change.type == "DELETED":
            gone = self._objects.pop(key, None)
            if gone is None:
                return
            self._sink.remove(gone)
        else:
            obj = _decoded(key, change.obj)
            if obj is None:
                gone = self._objects.pop(key, None)
                if gone is not None:
                    self._sink.remove(gone)
                return
            self._objects[key] = obj
            self._sink.put(obj)
        self._on_change()

    def _read_up_to(self, revision: int) -> None:
        if revision <= self.revision:
            return
        self.revision = revision
        if self._waiters:
            done = [(r, w) for r, w in self._waiters if r <= revision]
            for item in done:
                self._waiters.remove(item)
                if not item[1].done():
                    item[1].set_result(None)


def _decoded(key: str, obj: dict[str, Any]) -> CachedObject | None:
    """The api object stored at `key`; one that does not decode is logged and left out."""
    objects, errors = decode_documents([obj])
    if errors or len(objects) != 1 or not isinstance(objects[0], _CACHED):
        problems = "; ".join(str(e) for e in errors) or "not a cluster object"
        log.warning("skipping undecodable object", extra={"key": key, "error": problems})
        return None
    return objects[0]
