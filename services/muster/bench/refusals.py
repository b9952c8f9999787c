"""A bench client's Submit refused for the gateway's limit on calls in flight, sent again.

At a load of 10–35 a paced run's gateway can fall more than `--max-calls` calls behind (256
at 200/s is 1.3 s), and the gateway then refuses the next with RESOURCE_EXHAUSTED before
reading any of it. A client is expected to back off and send such a call again (gRPC's own
guidance for RESOURCE_EXHAUSTED), so the bench does: the call's latency still counts from its
first try, and the row counts the refusals (`REFUSED`), so the wait is seen, never hidden. Any
other error, or refusals past `GIVE_UP_S`, ends the case.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import grpc
import grpc.aio

T = TypeVar("T")

FIRST_BACKOFF_S: Final = 0.1
MAX_BACKOFF_S: Final = 2.0
GIVE_UP_S: Final = 60.0  # of refusals in a row for one call: the gateway is not catching up
# What the gateway's refusal says (`gateway.loop_server.refused_message`), and gRPC's own
# (a gateway before it named the limit): either way nothing of the call was done.
_LIMIT_WORDS: Final = ("calls at once", "Concurrent RPC limit exceeded")


class Refusals:
    """How many calls a case's gateway refused for its limit, each sent again after a backoff."""

    def __init__(self, *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.count = 0
        self._sleep = sleep

    async def call(self, send: Callable[[], Awaitable[T]]) -> T:
        """`send()`'s answer, sent again while the gateway refuses it for its limit."""
        backoff_s, waited_s = FIRST_BACKOFF_S, 0.0
        while True:
            try:
                return await send()
            except grpc.aio.AioRpcError as err:
                if not refused_for_limit(err) or waited_s >= GIVE_UP_S:
                    raise
            self.count += 1
            pause = backoff_s * random.uniform(0.5, 1.0)  # jitter, not a secret
            await self._sleep(pause)
            waited_s += pause
            backoff_s = min(2 * backoff_s, MAX_BACKOFF_S)


def refused_for_limit(err: grpc.aio.AioRpcError) -> bool:
    """Whether `err` is the gateway refusing a call for its limit on calls in flight."""
    details = err.details() or ""
    return err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and any(
        w in details for w in _LIMIT_WORDS
    )
