"""Cancellation: what nats-py may have swallowed, and work that must finish once started."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine
from typing import TypeVar

T = TypeVar("T")


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


async def gather_or_cancel(*work: Awaitable[T]) -> list[T]:
    """Await `work` side by side; their results in order.

    When one fails, the others are cancelled and awaited before its exception is raised (and
    the same when this is cancelled): `asyncio.gather` would leave them running, orphans that
    go on publishing (and retrying) after their caller gave up on them.
    """
    if len(work) <= 1:  # nothing to run beside it: awaited here, as cheap as can be
        return [await w for w in work]
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        left = [t for t in tasks if not t.done()]
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)
        # Read even when cancelled, so that no failure goes unretrieved.
        failed = [e for t in tasks if not t.cancelled() and (e := t.exception()) is not None]
    if failed:
        raise failed[0]
    return [t.result() for t in tasks]
