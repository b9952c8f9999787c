"""How fast the binder binds: at most N binds at once, and at most R per second (0: unlimited)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager


class BindPacer:
    """Bounds concurrent binds with a semaphore and spaces their starts by 1/rate seconds."""

    def __init__(
        self,
        *,
        max_concurrent: int,
        per_second: float,
        clock_s: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max concurrent binds must be >= 1, got {max_concurrent}")
        if per_second < 0:
            raise ValueError(f"binds per second must be >= 0, got {per_second:g}")
        self._slots = asyncio.Semaphore(max_concurrent)
        self._interval_s = 1.0 / per_second if per_second else 0.0
        self._clock_s = clock_s
        self._sleep = sleep
        self._next_s = 0.0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one bind slot, started no sooner than the rate allows."""
        async with self._slots:
            if self._interval_s:
                now = self._clock_s()
                start = max(now, self._next_s)
                self._next_s = start + self._interval_s  # claimed before sleeping: no two share
                if start > now:
                    await self._sleep(start - now)
            yield
