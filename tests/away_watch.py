"""A cluster backend whose watch fails while `away` is set (a NATS outage, an API server cut
off), for tests of a watch that must resume or list again. Wraps any backend; only `watch` and
`current_revision` are used by the reader under test: gang-permit's cache (`running_cache`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, cast

from muster.cluster.backend import ClusterBackend, ClusterChange, Selection
from muster.cluster.errors import ClusterError
from muster.gangpermit.cache import ClusterCache
from muster.gangpermit.state import GangPermitState


class AwayWatch:
    """`inner`'s watch, failing at its next change (or at once) while `away` is set."""

    def __init__(self, inner: ClusterBackend) -> None:
        self.inner = inner
        self.away = asyncio.Event()
        self.failed = asyncio.Event()  # set once a watch failed for being away

    def backend(self) -> ClusterBackend:
        return cast(ClusterBackend, self)

    async def current_revision(self, *, selection: Selection = "workloads") -> int:
        return await self.inner.current_revision(selection=selection)

    async def watch(
        self, *, on_progress: Callable[[int], None] | None = None, **options: Any
    ) -> AsyncGenerator[ClusterChange, None]:
        self._fail_if_away()
        changes = self.inner.watch(on_progress=on_progress, **options)
        async with contextlib.aclosing(changes):
            async for change in changes:
                self._fail_if_away()
                yield change

    def _fail_if_away(self) -> None:
        if self.away.is_set():
            self.failed.set()
            raise ClusterError("", "Unavailable", "watch away", temporary=True)


@contextlib.asynccontextmanager
async def running_cache(
    backend: ClusterBackend,
) -> AsyncIterator[tuple[GangPermitState, ClusterCache]]:
    """Gang-permit's state fed by its cluster cache over `backend`, the cache running, and
    read up to now."""
    state = GangPermitState(cluster="local")
    state.restored()
    cache = ClusterCache(backend, sink=state)
    task = asyncio.create_task(cache.run())
    try:
        await cache.sync(timeout_s=20)
        yield state, cache
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
