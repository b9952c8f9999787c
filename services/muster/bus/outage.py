"""Waiting out a NATS outage: back-off between attempts, one log line when it starts and one
when it ends.

Readers (replays, consume loops) and services' periodic writers call `Outage.failed` after an
attempt that failed because NATS is away (restarting, unreachable, JetStream between leaders)
and `Outage.recovered` after one that worked. A server restart makes dozens of such failures a
second across a service: logging each with its traceback buries the one fact that matters.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import nats.errors

# What "NATS is away" looks like from nats-py: its own errors (JetStream's derive from them),
# timeouts, and socket errors raised before nats-py wraps them.
UNAVAILABLE: Final = (nats.errors.Error, TimeoutError, OSError)

log = logging.getLogger(__name__)


class Outage:
    """Back-off for one reader or loop named `what`: doubles from `first_s` to `max_s`."""

    def __init__(
        self,
        what: str,
        *,
        first_s: float = 0.1,
        max_s: float = 2.0,
        logger: logging.Logger = log,
    ) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError("back-off needs 0 < first_s <= max_s")
        self.what = what
        self.first_s = first_s
        self.max_s = max_s
        self.failures = 0
        self._log = logger

    @property
    def delay_s(self) -> float:
        """The wait after the current run of failures."""
        return min(self.max_s, self.first_s * 2.0 ** min(max(self.failures - 1, 0), 30))

    async def failed(self, exc: BaseException) -> None:
        """Note a failed attempt (logged when it is the first of a run), then wait."""
        self.failures += 1
        if self.failures == 1:
            self._log.warning("%s: NATS unavailable (%s); retrying", self.what, _short(exc))
        await asyncio.sleep(self.delay_s)

    def recovered(self) -> None:
        """Note an attempt that worked; logs the end of an outage."""
        if self.failures:
            self._log.info("%s: NATS back after %d failed attempts", self.what, self.failures)
        self.failures = 0


def _short(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
