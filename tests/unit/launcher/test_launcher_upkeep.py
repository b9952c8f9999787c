"""The supervisor's restarts: the back-off that doubles and resets, and `keep_up` on real
processes (one that exits at once, one that runs), cancelled during a back-off."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from muster.launcher.nats_server import LaunchError
from muster.launcher.upkeep import (
    START_DEADLINE_S,
    BackOff,
    Exit,
    Liveness,
    keep_up,
    not_alive,
)


def test_the_back_off_doubles_to_its_cap_and_resets_after_a_long_run() -> None:
    back_off = BackOff()
    waits = [back_off.next(up_for_s=0.5) for _ in range(8)]
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60]
    assert back_off.next(up_for_s=59.9) == 60
    assert back_off.next(up_for_s=60.0) == 1  # it stayed up: a new exit starts over
    assert back_off.next(up_for_s=3.0) == 2


async def _spawn(code: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-c", code)


@contextlib.asynccontextmanager
async def kept(
    procs: list[asyncio.subprocess.Process],
    restart: Callable[[], Awaitable[None]],
    *,
    start_deadline_s: float = START_DEADLINE_S,
    liveness: Liveness | None = None,
) -> AsyncIterator[tuple[asyncio.Queue[Exit], asyncio.Queue[int]]]:
    """`keep_up` of the last of `procs` (`restart` appends the next) with a short back-off:
    its exits and the pids it started, as they come; then cancelled, nothing left running."""
    exits: asyncio.Queue[Exit] = asyncio.Queue()
    starts: asyncio.Queue[int] = asyncio.Queue()
    keeper = asyncio.create_task(
        keep_up(
            "svc",
            lambda: procs[-1],
            restart,
            exits.put_nowait,
            lambda: starts.put_nowait(procs[-1].pid),
            BackOff(first_s=0.01, max_s=0.04),
            start_deadline_s=start_deadline_s,
            liveness=liveness,
        )
    )
    try:
        yield exits, starts
    finally:
        keeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await keeper
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_a_process_that_keeps_exiting_is_started_again_each_time_and_recorded() -> None:
    procs = [await _spawn("raise SystemExit(3)")]

    async def restart() -> None:
        runs = len(procs) >= 3  # the first two restarts exit at start too
        procs.append(await _spawn("import time; time.sleep(60)" if runs else "raise SystemExit(3)"))
        if not runs:
            await procs[-1].wait()
            raise LaunchError("exited at start")

    async with kept(procs, restart) as (exits, starts):
        started = [await starts.get() for _ in range(3)]
        assert procs[-1].returncode is None  # the third restart runs
        procs[-1].send_signal(signal.SIGKILL)
        recorded = [await exits.get() for _ in range(4)]
    assert [e.status for e in recorded] == [3, 3, 3, -signal.SIGKILL]
    assert started == [p.pid for p in procs[1:4]]
    waits = [round(e.restart_at - e.at, 3) for e in recorded]
    assert waits == [0.01, 0.02, 0.04, 0.04]  # doubling to its cap: none of them stayed up


async def test_cancelled_during_its_back_off_it_starts_nothing() -> None:
    proc = await _spawn("raise SystemExit(1)")
    exits: asyncio.Queue[Exit] = asyncio.Queue()
    restarts: list[str] = []

    async def restart() -> None:
        restarts.append("started")

    keeper = asyncio.create_task(
        keep_up("svc", lambda: proc, restart, exits.put_nowait, lambda: None, BackOff(first_s=60))
    )
    exit = await exits.get()
    keeper.cancel()  # `muster down` while it waits out its back-off
    with pytest.raises(asyncio.CancelledError):
        await keeper
    assert (exit.name, exit.status) == ("svc", 1)
    assert restarts == []


async def test_a_start_that_hangs_past_its_deadline_is_killed_recorded_and_started_again() -> None:
    procs = [await _spawn("raise SystemExit(1)")]

    async def restart() -> None:
        procs.append(await _spawn("import time; time.sleep(60)"))
        if len(procs) == 2:  # the first restart never serves (a readiness never reached)
            await asyncio.Event().wait()

    async with kept(procs, restart, start_deadline_s=0.5) as (exits, starts):
        started = [await starts.get() for _ in range(2)]
        recorded = [await exits.get() for _ in range(2)]
        assert procs[-1].returncode is None  # the second restart serves and runs on
    assert started == [p.pid for p in procs[1:3]]
    assert procs[1].returncode == -signal.SIGKILL  # the hung one is not left running
    assert [(e.status, e.why) for e in recorded] == [
        (1, ""),
        (-signal.SIGKILL, "not ready in 0.5s"),
    ]
    assert [round(e.restart_at - e.at, 3) for e in recorded] == [0.01, 0.02]  # its back-off


async def test_a_running_process_its_liveness_gives_up_on_is_stopped_recorded_and_restarted() -> (
    None
):
    procs = [await _spawn("import time; time.sleep(60)")]
    stall = asyncio.Event()
    judged: list[int] = []

    async def liveness() -> str:
        judged.append(procs[-1].pid)
        if len(judged) == 1:  # the first process stalls; the restarted one does not
            await stall.wait()
            return "liveness: stalled"
        await asyncio.Event().wait()
        return ""

    async def restart() -> None:
        procs.append(await _spawn("import time; time.sleep(60)"))

    async with kept(procs, restart, liveness=liveness) as (exits, starts):
        stall.set()
        exit = await exits.get()
        started = await starts.get()
        assert procs[-1].returncode is None  # the restart runs on
    assert (exit.status, exit.why) == (-signal.SIGTERM, "liveness: stalled")  # stopped gracefully
    assert started == procs[1].pid
    assert judged[0] == procs[0].pid


async def test_not_alive_returns_once_liveness_said_not_serving_enough_times_in_a_row() -> None:
    server = grpc.aio.server()
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        await health.set("liveness", health_pb2.HealthCheckResponse.NOT_SERVING)
        why = await asyncio.wait_for(
            not_alive(lambda: f"127.0.0.1:{port}", every_s=0.01, failures=3), 10
        )
        assert why == "liveness: stalled"
    finally:
        await server.stop(grace=None)


async def test_not_alive_counts_a_liveness_that_never_answers_but_not_a_refused_port() -> None:
    with socket.socket() as frozen, socket.socket() as closed:
        frozen.bind(("127.0.0.1", 0))
        frozen.listen()  # connections wait in its backlog: a process stopped, its port open
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        where = {"address": f"127.0.0.1:{closed.getsockname()[1]}"}
        looks = asyncio.create_task(
            not_alive(lambda: where["address"], every_s=0.01, failures=2, timeout_s=0.2)
        )
        await asyncio.wait({looks}, timeout=1.0)
        assert not looks.done()  # refused, look after look: not counted
        where["address"] = f"127.0.0.1:{frozen.getsockname()[1]}"
        assert await asyncio.wait_for(looks, 10) == "liveness: no answer in 0.2s"
