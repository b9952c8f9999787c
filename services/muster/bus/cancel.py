"""Cancellation that nats-py may have swallowed, checked by every loop that talks to NATS."""

from __future__ import annotations

import asyncio


def raise_if_cancelling() -> None:
    """Raise CancelledError if this task was asked to stop.

    nats-py waits with `asyncio.wait_for`, which in Python 3.11 can swallow a cancellation that
    arrives just as the wait ends (fixed in 3.12); a loop that only relied on the exception would
    then run on and a service would not stop on SIGTERM. Loops call this before each pass.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
