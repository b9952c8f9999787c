"""`muster up` keeps its processes up: one that exits is started again, as the kubelet
restarts a container.

The wait before each restart doubles (1 s, 2 s, ... 60 s at most) while the process keeps
exiting, and goes back to 1 s once it has stayed up 60 s: a service that crashes at start is
not restarted in a tight loop, and a service that exits now and then (admission, when it loses
its shard lease) is back within a second. Every exit is recorded (`Restarted`), for
`muster status` to show, never hidden.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from muster.launcher.nats_server import LaunchError

FIRST_BACK_OFF_S: Final = 1.0
MAX_BACK_OFF_S: Final = 60.0
RESET_AFTER_S: Final = 60.0  # up this long: the next exit waits the first back-off again


@dataclass
class BackOff:
    """The wait before the next start of a process that exited (pure: the caller's clock)."""

    first_s: float = FIRST_BACK_OFF_S
    max_s: float = MAX_BACK_OFF_S
    reset_after_s: float = RESET_AFTER_S
    last_s: float = 0.0  # the wait before the previous start; 0: none yet

    def next(self, up_for_s: float) -> float:
        """The wait after an exit of a process that had run `up_for_s` seconds."""
        if self.last_s == 0.0 or up_for_s >= self.reset_after_s:
            self.last_s = self.first_s
        else:
            self.last_s = min(self.last_s * 2, self.max_s)
        return self.last_s


@dataclass(frozen=True)
class Exit:
    name: str
    status: int | None  # the exit status; -N: killed by signal N; None: it never started
    at: float  # wall clock, seconds since the epoch
    restart_at: float  # when it will be started again (wall clock)


Running = Callable[[], asyncio.subprocess.Process | None]


async def keep_up(
    name: str,
    running: Running,
    restart: Callable[[], Awaitable[None]],
    exited: Callable[[Exit], None],
    restarted: Callable[[], None],
    back_off: BackOff | None = None,
) -> None:
    """Start `name` again each time it exits, until cancelled (`muster down`, which cancels
    this first, so that the stop's own exits are not restarted). `running()`: its current
    process; `restart()`: start it and wait until it serves (LaunchError: it exited first);
    `exited` and `restarted` record each exit and each start."""
    back_off = back_off or BackOff()
    while True:
        proc = running()
        since = time.monotonic()
        status = await proc.wait() if proc is not None else None
        wait_s = back_off.next(time.monotonic() - since)
        now = time.time()
        exited(Exit(name=name, status=status, at=now, restart_at=now + wait_s))
        await asyncio.sleep(wait_s)  # cancelled here by `muster down` during a back-off
        # It exited again, or could not be started: the next turn records it and waits longer.
        with contextlib.suppress(LaunchError, OSError):
            await restart()
        restarted()
