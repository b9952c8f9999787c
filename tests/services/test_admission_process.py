"""`muster service admission` as a real process: SIGKILL mid-run, restart, nothing lost."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from admission_world import (
    basic_config,
    count,
    fact,
    publish,
    submitted,
    workload,
)
from budget import wait_s
from bus_helpers import EventLog
from grpc_health.v1 import health_pb2, health_pb2_grpc

from muster.bus import Bus

pytestmark = pytest.mark.timeout(90)

SERVING = health_pb2.HealthCheckResponse.SERVING
# The successor waits this long for a SIGKILLed replica's lease (its TTL). With 2 s (renewed
# every 0.67 s) a replica that went 1.33 s without renewing, as a loaded test process may
# (load ~40 on 2 cores), lost its lease and stopped before it was killed.
LEASE_TTL_S = "5"


class Process:
    def __init__(self, proc: asyncio.subprocess.Process, health: str, log: Path) -> None:
        self.proc = proc
        self.health = health
        self.log = log

    async def wait_serving(self, *, timeout_s: float | None = None) -> None:
        """Until it serves (at most `timeout_s`; None: what is left of the test's time)."""
        timeout_s = wait_s(timeout_s)
        async with grpc.aio.insecure_channel(self.health) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest(service="admission"))

            async def until() -> None:
                async for reply in watch:
                    if reply.status == SERVING:
                        return

            try:
                await asyncio.wait_for(until(), timeout_s)
            except TimeoutError:
                pytest.fail(f"admission not serving in {timeout_s}s:\n{self.log.read_text()}")
            finally:
                watch.cancel()


@contextlib.asynccontextmanager
async def admission_process(nats_url: str, log: Path, *args: str) -> AsyncIterator[Process]:
    with log.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "muster.cli.main", "service", "admission",
            "--nats", nats_url, "--health-port", "0", "--lease-ttl-seconds", LEASE_TTL_S, *args,
            stdout=asyncio.subprocess.PIPE, stderr=stderr,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.startswith(b"health: "), line
        yield Process(proc, line.decode().split(" ", 1)[1].strip(), log)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_sigkilled_process_is_replaced_without_losing_or_repeating_admissions(
    bus: Bus, nats_server: str, tmp_path: Path, events: EventLog
) -> None:
    log = tmp_path / "admission.log"
    await basic_config(bus, cpu="3")
    async with admission_process(nats_server, log) as first:
        await first.wait_serving()
        await publish(bus, *(submitted(workload(f"p{i}", cpu="1")) for i in range(5)))
        for i in range(3):
            await events.wait_for("admitted", workload=f"ns/p{i}")
        await events.wait_for("pending", workload="ns/p3")
        first.proc.send_signal(signal.SIGKILL)
        assert await first.proc.wait() == -signal.SIGKILL

    await publish(bus, fact("finished", "ns/p0"), submitted(workload("p5", cpu="1")))
    async with admission_process(nats_server, log) as second:
        await second.wait_serving()  # once the dead one's lease expired
        await events.wait_for("admitted", workload="ns/p3")
        await publish(bus, fact("finished", "ns/p1"), fact("finished", "ns/p2"))
        await events.wait_for("admitted", workload="ns/p4")
        await events.wait_for("admitted", workload="ns/p5")
        # The killed process's unacked events come back only after the ack wait (30 s); a
        # last workload, decided after all the others were, stands in for draining.
        await publish(bus, fact("finished", "ns/p3"), submitted(workload("last", cpu="1")))
        await events.wait_for("admitted", workload="ns/last")
        for i in range(6):
            assert count(events, "admitted", f"ns/p{i}") == 1, i

        second.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.proc.wait(), 15) == 0
