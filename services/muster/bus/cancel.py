"""Cancellation: what nats-py may have swallowed, and work that must finish once started."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine


def raise_if_cancelling() -> None:
    """Raise CancelledError if this task was asked to stop.

    nats-py waits with `asyncio.wait_for`, which in Python 3.11 can swallow a cancellation that
    arrives just as the wait ends (fixed in 3.12); a loop that only relied on the exception would
    then run on and a service would not stop on SIGTERM. Loops call this before each pass.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def finishing(work: Coroutine[object, object, object]) -> None:
    """Run `work`; cancelled meanwhile, let it finish first (then re-raise the cancellation).

    For work whose effects must not stop halfway: a round publishing its decisions, a batch
    being acked.
    """
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        raise
