"""Clocks for the simulated cluster: the wall clock, and a manual one tests move by hand.

Timestamps the sim writes (creationTimestamp, startTime) and the kubelet's timers both read
the injected clock, so a test can stop a kubelet, move time on and check a restarted one.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Seconds since the epoch, and a way to wait for them to pass."""

    def now_s(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class WallClock:
    """The real time."""

    def now_s(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


class ManualClock:
    """A clock that moves only when `advance` is called; sleepers wake once their time comes."""

    def __init__(self, start_s: float = 1_700_000_000.0) -> None:
        self._now_s = start_s
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._changed = asyncio.Event()

    def now_s(self) -> float:
        return self._now_s

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now_s + seconds, next(self._order), wake))
        self._notify()
        try:
            await wake
        finally:
            self._notify()  # woken or cancelled: one sleeper fewer

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds` and wake every sleeper whose deadline has come."""
        self._now_s += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now_s:
            _, _, wake = heapq.heappop(self._sleepers)
            if not wake.done():
                wake.set_result(None)
        self._notify()

    def deadlines(self) -> list[float]:
        """Return when the current sleepers wake, earliest first (cancelled ones left out)."""
        return sorted(d for d, _, wake in self._sleepers if not wake.done())

    async def wait_for_sleepers(self, count: int, *, exactly: bool = False) -> list[float]:
        """Wait until at least (or `exactly`) `count` tasks sleep on this clock; their deadlines."""
        while not (len(self.deadlines()) == count if exactly else len(self.deadlines()) >= count):
            self._changed.clear()
            await self._changed.wait()
        return self.deadlines()

    def _notify(self) -> None:
        self._changed.set()
