"""`muster up` keeps its processes up: one that exits is started again, as the kubelet
restarts a container.

The wait before each restart doubles (1 s, 2 s, ... 60 s at most) while the process keeps
exiting, and goes back to 1 s once it has stayed up 60 s: a service that crashes at start is
not restarted in a tight loop, and a service that exits now and then (admission, when it loses
its shard lease) is back within a second. Every exit is recorded (`Restarted`), for
`muster status` to show, never hidden.

A start that does not serve within its deadline (`START_DEADLINE_S`, as a Pod's startup
probe) is killed and counts as an exit, recorded with why: a process that hangs at start
without exiting would otherwise be waited on for ever.
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
# A restart serves by then or is killed. Well past an admission replica's wait for the shard
# lease its predecessor held (5 s) and its rebuild from the stream.
START_DEADLINE_S: Final = 120.0


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
    why: str = ""  # why it ended, when the status does not say ("not ready in 120s")


Running = Callable[[], asyncio.subprocess.Process | None]


async def keep_up(
    name: str,
    running: Running,
    restart: Callable[[], Awaitable[None]],
    exited: Callable[[Exit], None],
    restarted: Callable[[], None],
    back_off: BackOff | None = None,
    *,
    start_deadline_s: float = START_DEADLINE_S,
) -> None:
    """Start `name` again each time it exits, until cancelled (`muster down`, which cancels
    this first, so that the stop's own exits are not restarted). `running()`: its current
    process; `restart()`: start it and wait until it serves (LaunchError: it exited first);
    `exited` and `restarted` record each exit and each start. A restart not serving within
    `start_deadline_s` is killed: its exit is recorded with why, and it waits its back-off."""
    back_off = back_off or BackOff()
    why = ""
    while True:
        proc = running()
        since = time.monotonic()
        status = await proc.wait() if proc is not None else None
        wait_s = back_off.next(time.monotonic() - since)
        now = time.time()
        exited(Exit(name=name, status=status, at=now, restart_at=now + wait_s, why=why))
        await asyncio.sleep(wait_s)  # cancelled here by `muster down` during a back-off
        # It exited again, or could not be started: the next turn records it and waits longer.
        why = await _start_within(restart, running, start_deadline_s)
        restarted()


async def _start_within(
    restart: Callable[[], Awaitable[None]], running: Running, deadline_s: float
) -> str:
    """Run `restart()`; a start that hangs past `deadline_s` is killed. Why it was, or ""."""
    deadline = asyncio.timeout(deadline_s)
    try:
        async with deadline:
            await restart()
    except TimeoutError:
        if not deadline.expired():
            return ""  # its own wait gave up: it did not start
        hung = running()
        if hung is not None and hung.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                hung.kill()
            await hung.wait()
        return f"not ready in {deadline_s:g}s"
    except (LaunchError, OSError):
        pass
    return ""
