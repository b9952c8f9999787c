"""What a launcher starts ends with it: a SIGKILLed `muster run` or bench cannot stop its
children, whose services ran on for ever, reconnecting to a nats-server that ran on too.
(`muster up` asks for the opposite: tests/services/test_muster_up.py.)"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc.aio
import pytest
from budget import wait_s
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from muster.launcher.lifeline import tied_to_launcher

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal"),
]

LAUNCHER = """
import asyncio, sys
from pathlib import Path
from muster.launcher.nats_server import NatsServer
from muster.launcher.stack import Stack

async def main():
    where = Path(sys.argv[1])
    nats = NatsServer(where / "jetstream")
    url = await nats.start(log_path=where / "nats-server.log")
    stack = Stack(nats_url=url, cluster="local", shards=1, speed=1, log_dir=where,
                  only={"preemption"})
    await stack.start()
    print(nats.process.pid, stack.services[0].process.pid, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def running(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def test_the_services_and_nats_server_stop_once_their_launcher_is_killed(
    tmp_path: Path,
) -> None:
    launcher = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAUNCHER, str(tmp_path), stdout=asyncio.subprocess.PIPE
    )
    assert launcher.stdout is not None
    try:
        line = await asyncio.wait_for(launcher.stdout.readline(), wait_s(None))
        children = [int(pid) for pid in line.split()]
        assert len(children) == 2
        assert all(map(running, children))
    finally:
        launcher.kill()
        await launcher.wait()

    async with asyncio.timeout(wait_s(None)):
        while any(map(running, children)):  # noqa: ASYNC110  # other processes' exits
            await asyncio.sleep(0.1)


async def test_children_start_whole_while_grpc_is_busy_in_the_launcher() -> None:
    """A launcher that is itself a gRPC client and server (the chaos bench, `muster run`'s
    driver) starts its children without gRPC's fork handlers running in them: started through
    a `preexec_fn`, about one child in ten died before its exec (SIGABRT or SIGSEGV)."""
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = health_pb2_grpc.HealthStub(channel)

    async def busy() -> None:
        while True:
            await stub.Check(health_pb2.HealthCheckRequest())

    callers = [asyncio.create_task(busy()) for _ in range(4)]
    try:
        statuses = []
        for _ in range(60):
            child = await asyncio.create_subprocess_exec(*tied_to_launcher(["true"]))
            statuses.append(await child.wait())
    finally:
        for caller in callers:
            caller.cancel()
        await channel.close()
        await server.stop(None)
    assert statuses == [0] * 60
