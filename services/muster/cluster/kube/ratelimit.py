"""A token bucket for API-server writes: `qps` tokens a second, at most `burst` saved up.

Used by `KubeBackend` (binder writes) and `StatusWriter` (status writes), each with its own
bucket, so status traffic never starves the binder.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """Waits in `acquire` until a token is free; `qps` <= 0 means unlimited.

    Reservation-style: each caller takes the next token at once (the balance may go negative)
    and sleeps until that token would have been earned, so waiters are served in call order
    without polling.
    """

    def __init__(
        self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take one token; return how many seconds to wait before using it (0: now)."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        delay_s = self.reserve()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
