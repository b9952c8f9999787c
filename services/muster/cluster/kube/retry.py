"""Retrying temporary failures of the API server: back-off, Retry-After, and the retry loop.

Apart from the transport so that settings (`KubeConfig`, `WatchSettings`) can name a `Backoff`
without importing the HTTP client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import msgspec

from muster.bus.progress import advanced
from muster.cluster.errors import ClusterError

T = TypeVar("T")


def cancelling_check() -> None:
    """Raise CancelledError if this task was asked to stop. An aiohttp timeout that fires just
    as the task is cancelled turns the cancellation into a timeout (a temporary ClusterError
    here): a loop that retries those calls this first, or it would never stop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class UnavailableError(ClusterError):
    """A temporary error answer (429, 5xx, ...); `retry_after_s` when the server said when."""

    def __init__(self, obj: str, reason: str, message: str, *, retry_after_s: float | None) -> None:
        super().__init__(obj, reason, message, temporary=True)
        self.retry_after_s = retry_after_s


class Backoff(msgspec.Struct, frozen=True, kw_only=True):
    """Exponential back-off between retries of temporary failures."""

    initial_s: float = 0.05
    max_s: float = 5.0
    attempts: int = 8  # for `retrying`; watches retry forever

    def delay_s(self, attempt: int) -> float:
        """The delay after failed attempt number `attempt` (1, 2, ...)."""
        return min(self.initial_s * float(2 ** min(attempt - 1, 60)), self.max_s)

    def delays(self) -> Iterator[float]:
        attempt = 1
        while True:
            yield self.delay_s(attempt)
            attempt += 1

    def wait_s(self, delay_s: float, err: ClusterError) -> float:
        """`delay_s`, or the server's Retry-After when it asked for longer (capped)."""
        wanted = err.retry_after_s if isinstance(err, UnavailableError) else None
        return min(max(delay_s, wanted or 0.0), max(self.max_s, delay_s))


async def retrying(op: Callable[[], Awaitable[T]], *, backoff: Backoff) -> T:
    """Run `op` until it succeeds, retrying temporary ClusterErrors (a lost optimistic write
    re-reads: `op` is the whole read-modify-write) `backoff.attempts` times in all. Each
    answer is progress for the watchdog (bus/progress.py): a call retrying against a busy API
    server for a minute is slow, not stalled."""
    delays = backoff.delays()
    for _ in range(backoff.attempts - 1):
        try:
            return await op()
        except ClusterError as err:
            if not err.temporary:
                raise
            advanced()
            await asyncio.sleep(backoff.wait_s(next(delays), err))
    return await op()
