"""What a test may still spend waiting: its pytest-timeout, less a margin for its teardown.

A wait in a test fails when the test's own time is nearly up, not after a fixed few seconds:
how long a chain of services takes to answer depends on the machine's load (a PubAck took over
5 s with the load average at 30 on 2 cores), while what the wait is for does not change. The
wait still fails before pytest-timeout would, with its own message (what it last saw), and the
services are still stopped in the test's teardown. `tests/conftest.py` starts the clock.
"""

from __future__ import annotations

import time

UNBOUNDED_S = 3600.0  # no timeout set (`--timeout 0` while debugging): wait as long as that
MARGIN = 0.15  # of the test's timeout, kept for its teardown (at least MARGIN_MIN_S)
MARGIN_MIN_S = 5.0

_deadline: float | None = None


def start(timeout_s: float) -> None:
    """A test starts with `timeout_s` to run (0: none)."""
    global _deadline
    if timeout_s <= 0:
        _deadline = None
        return
    _deadline = time.monotonic() + timeout_s - max(MARGIN_MIN_S, MARGIN * timeout_s)


def seconds_left() -> float:
    """How long a wait may take now (at least a moment: a late wait still looks once)."""
    if _deadline is None:
        return UNBOUNDED_S
    return max(0.5, _deadline - time.monotonic())


def wait_s(timeout_s: float | None) -> float:
    """A wait's bound: `timeout_s` when the test gives one, else the rest of its time."""
    return seconds_left() if timeout_s is None else timeout_s
