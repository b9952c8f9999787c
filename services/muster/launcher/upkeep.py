"""`muster up` keeps its processes up: one that exits is started again, as the kubelet
restarts a container.

The wait before each restart doubles (1 s, 2 s, ... 60 s at most) while the process keeps
exiting, and goes back to 1 s once it has stayed up 60 s: a service that crashes at start is
not restarted in a tight loop, and a service that exits now and then (admission, when it loses
its shard lease) is back within a second. Every exit is recorded (`Restarted`), for
`muster status` to show, never hidden.

A start that does not serve within its deadline (`START_DEADLINE_S`, as a Pod's startup
probe) is killed and counts as an exit, recorded with why: a process that hangs at start
without exiting would otherwise be waited on for ever. So is a running service whose gRPC
liveness says NOT_SERVING, or does not answer within `LIVENESS_TIMEOUT_S`,
`LIVENESS_FAILURES` looks in a row (`LIVENESS_EVERY_S` apart), as the kubelet's
livenessProbe would: its work stopped moving (bus/watchdog.py) or its event loop is stuck,
and a restart hands its messages to the next start.
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
# A running service is restarted after its liveness said NOT_SERVING this many looks in a row,
# this far apart (deploy/'s livenessProbes: 10 s, 3). Its own stall window comes first.
LIVENESS_EVERY_S: Final = 5.0
LIVENESS_FAILURES: Final = 3
LIVENESS_TIMEOUT_S: Final = 5.0  # an answer slower than this is a failure (a stuck event loop)
STOP_GRACE_S: Final = 10.0  # a service restarted for its liveness: SIGTERM, then SIGKILL


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
Liveness = Callable[[], Awaitable[str]]
"""Returns, saying why, once the running process is to be restarted though it runs."""


async def keep_up(
    name: str,
    running: Running,
    restart: Callable[[], Awaitable[None]],
    exited: Callable[[Exit], None],
    restarted: Callable[[], None],
    back_off: BackOff | None = None,
    *,
    start_deadline_s: float = START_DEADLINE_S,
    liveness: Liveness | None = None,
) -> None:
    """Start `name` again each time it exits, until cancelled (`muster down`, which cancels
    this first, so that the stop's own exits are not restarted). `running()`: its current
    process; `restart()`: start it and wait until it serves (LaunchError: it exited first);
    `exited` and `restarted` record each exit and each start. A restart not serving within
    `start_deadline_s` is killed: its exit is recorded with why, and it waits its back-off.
    With `liveness`, a process it says is not alive any more is stopped (SIGTERM, SIGKILL
    after `STOP_GRACE_S`) and started again the same way, its exit recorded with why."""
    back_off = back_off or BackOff()
    why = ""
    while True:
        proc = running()
        since = time.monotonic()
        status: int | None = None
        if proc is not None:
            status, unalive = await _exit_or_unalive(proc, liveness)
            why = why or unalive
        wait_s = back_off.next(time.monotonic() - since)
        now = time.time()
        exited(Exit(name=name, status=status, at=now, restart_at=now + wait_s, why=why))
        await asyncio.sleep(wait_s)  # cancelled here by `muster down` during a back-off
        # It exited again, or could not be started: the next turn records it and waits longer.
        why = await _start_within(restart, running, start_deadline_s)
        restarted()


async def _exit_or_unalive(
    proc: asyncio.subprocess.Process, liveness: Liveness | None
) -> tuple[int, str]:
    """`proc`'s exit status once it exits, and "" ; or, when `liveness` returns first, the
    status once stopped for it, and why."""
    exited = asyncio.ensure_future(proc.wait())
    if liveness is None:
        return await exited, ""
    probe = asyncio.ensure_future(liveness())
    try:
        await asyncio.wait({exited, probe}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not probe.done():
            probe.cancel()
        if not exited.done() and not probe.done():  # cancelled: `muster down` stops it
            exited.cancel()
    if exited.done():
        return exited.result(), ""
    why = probe.result()
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        await asyncio.wait_for(asyncio.shield(exited), STOP_GRACE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    return await exited, why


async def not_alive(
    address: Callable[[], str],
    *,
    every_s: float = LIVENESS_EVERY_S,
    failures: int = LIVENESS_FAILURES,
    timeout_s: float = LIVENESS_TIMEOUT_S,
) -> str:
    """Return once the gRPC health at `address()` failed `failures` looks in a row, `every_s`
    apart, saying why: liveness NOT_SERVING (a consumer stalled), or no answer within
    `timeout_s` (its event loop is stuck: the kubelet counts a probe's timeout as a failure
    too). A port that refuses the connection (starting, gone) does not count: the exit and
    the start deadline judge that."""
    said, why = 0, ""
    while said < failures:
        await asyncio.sleep(every_s)
        why = await _liveness_failure(address(), timeout_s=timeout_s)
        said = said + 1 if why else 0
    return f"liveness: {why}"


async def _liveness_failure(address: str, *, timeout_s: float) -> str:
    """Why the liveness at `address` failed ("stalled", "no answer in 5s"), or "" if not."""
    # Imported here: `muster up`, `status` and `down` import this module, and need no gRPC.
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from muster.bus.service import LIVENESS

    if not address:
        return ""
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=LIVENESS), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return f"no answer in {timeout_s:g}s"
            return ""
    return "stalled" if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING else ""


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
