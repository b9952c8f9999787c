"""The service runtime, run as a real process: health, SIGTERM with in-flight work, failures."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from budget import seconds_left, wait_s
from bus_helpers import EventLog, submitted
from grpc_health.v1 import health_pb2, health_pb2_grpc

from muster.bus import EVENTS_STREAM, Bus
from muster.bus.service import EVENT_LOOP_ENV, LIVENESS, run_loop
from muster.cli import service as service_command

pytestmark = pytest.mark.timeout(60)

TINY = Path(__file__).with_name("tiny_service.py")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Service:
    def __init__(self, proc: asyncio.subprocess.Process, health: str, log: Path) -> None:
        self.proc = proc
        self.health = health
        self.log = log

    async def wait_for_status(
        self, status: int, *, timeout_s: float | None = None, service: str = "tiny"
    ) -> None:
        """Watch the gRPC health service until it reports `status` for `service`."""
        async with grpc.aio.insecure_channel(self.health) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest(service=service))

            async def until() -> None:
                async for reply in watch:
                    if reply.status == status:
                        return

            try:
                await asyncio.wait_for(until(), wait_s(timeout_s))
            finally:
                watch.cancel()

    async def statuses_for(self, seconds: float, *, service: str) -> list[int]:
        """Every status `service` reports while watched for `seconds` (the first: its current)."""
        seen: list[int] = []
        async with grpc.aio.insecure_channel(self.health) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=service)
            )

            async def record() -> None:
                async for reply in watch:
                    seen.append(reply.status)  # noqa: PERF401 - kept as they come: cut by a timeout

            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(record(), seconds)
            watch.cancel()
        return seen

    async def status(self, service: str) -> int:
        async with grpc.aio.insecure_channel(self.health) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=5
            )
        return int(reply.status)

    async def exit_status(self, *, timeout_s: float) -> int:
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            pytest.fail(f"service still running after {timeout_s}s:\n{self.log.read_text()}")


@contextlib.asynccontextmanager
async def tiny_service(nats_url: str, tmp_path: Path, *args: str) -> AsyncIterator[Service]:
    log = tmp_path / "tiny.log"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(TINY), "--nats", nats_url, "--health-port", "0", *args,
            stdout=asyncio.subprocess.PIPE, stderr=stderr,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), seconds_left())  # started
        assert line.startswith(b"health: "), (line, log.read_text())
        yield Service(proc, line.decode().split(" ", 1)[1].strip(), log)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_service_reports_serving_then_exits_0_on_sigterm(
    nats_server: str, tmp_path: Path
) -> None:
    async with tiny_service(nats_server, tmp_path, "--grace-seconds", "5") as service:
        await service.wait_for_status(SERVING)
        service.proc.send_signal(signal.SIGTERM)
        assert await service.exit_status(timeout_s=5) == 0
    assert "stopped" in service.log.read_text()


async def test_sigterm_lets_the_running_handler_finish_before_exit(
    nats_server: str, tmp_path: Path, bus: Bus, events: EventLog
) -> None:
    args = ("--work-seconds", "1", "--grace-seconds", "10")
    async with tiny_service(nats_server, tmp_path, *args) as service:
        await service.wait_for_status(SERVING)
        await bus.publish(submitted("ns/a"))
        await events.wait_for("running", workload="ns/a", timeout_s=10)
        service.proc.send_signal(signal.SIGTERM)
        assert await service.exit_status(timeout_s=10) == 0
    await events.wait_for("pending", workload="ns/a", timeout_s=5)
    info = await bus.js.consumer_info(EVENTS_STREAM, "tiny")
    assert info.num_ack_pending == 0  # acked before exit: not redelivered to the next replica


@pytest.mark.parametrize(
    ("tripwire", "task"), [("ns/crash", "tiny-crashes"), ("ns/crash-apart", "tiny-apart")]
)
async def test_a_dead_loop_stops_the_service_with_status_1_naming_it(
    nats_server: str, tmp_path: Path, bus: Bus, tripwire: str, task: str
) -> None:
    """In the service's TaskGroup or started apart (`supervised`), a task that raised ends
    the service: its supervisor restarts it, instead of a service alive without the loop."""
    async with tiny_service(nats_server, tmp_path) as service:
        await service.wait_for_status(SERVING)
        await bus.publish(submitted(tripwire))
        assert await service.exit_status(timeout_s=20) == 1
    lines = service.log.read_text().splitlines()
    assert any(f"task {task} failed: RuntimeError('a loop of tiny died')" in x for x in lines)


async def test_service_exits_1_when_nats_cannot_be_reached(tmp_path: Path) -> None:
    args = ("--nats-connect-timeout", "1")
    async with tiny_service("nats://127.0.0.1:1", tmp_path, *args) as service:
        assert await service.exit_status(timeout_s=10) == 1
    assert "cannot connect to NATS" in service.log.read_text()


def test_muster_service_names_a_missing_service(capsys: pytest.CaptureFixture[str]) -> None:
    assert service_command.main(["nope"]) == 2
    assert "unknown service 'nope'" in capsys.readouterr().err
    assert service_command.main([]) == 2
    assert "services: watcher, admission" in capsys.readouterr().err


async def _loop_kind() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_services_run_on_uvloop_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert run_loop(_loop_kind()) == "uvloop"


def test_muster_event_loop_asyncio_keeps_the_standard_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert run_loop(_loop_kind()) == "asyncio"


async def test_a_wedged_handler_with_messages_waiting_makes_liveness_not_serving(
    nats_server: str, tmp_path: Path, bus: Bus, events: EventLog
) -> None:
    async with tiny_service(nats_server, tmp_path, "--stall-seconds", "1") as service:
        await service.wait_for_status(SERVING)
        assert await service.status(LIVENESS) == SERVING
        await bus.publish(submitted("ns/hang"))
        await events.wait_for("running", workload="ns/hang", timeout_s=10)
        await service.wait_for_status(NOT_SERVING, service=LIVENESS, timeout_s=15)
        assert await service.status("tiny") == SERVING  # readiness is not liveness
    line = next(x for x in service.log.read_text().splitlines() if "stalled" in x)
    assert "consumer tiny stalled: 1 message waiting" in line
    assert "in hand" in line


async def test_a_timer_that_stops_ticking_makes_liveness_not_serving(
    nats_server: str, tmp_path: Path, bus: Bus
) -> None:
    async with tiny_service(nats_server, tmp_path, "--stall-seconds", "0.5") as service:
        await service.wait_for_status(SERVING)
        assert await service.status(LIVENESS) == SERVING
        await bus.publish(submitted("ns/stop-ticking"))
        await service.wait_for_status(NOT_SERVING, service=LIVENESS, timeout_s=15)
        assert await service.status("tiny") == SERVING  # readiness is not liveness
    line = next(x for x in service.log.read_text().splitlines() if "stalled" in x)
    assert "timer tiny-timer stalled: no tick for" in line


async def test_an_idle_service_stays_alive_past_the_stall_window(
    nats_server: str, tmp_path: Path, bus: Bus, events: EventLog
) -> None:
    async with tiny_service(nats_server, tmp_path, "--stall-seconds", "0.5") as service:
        await service.wait_for_status(SERVING)
        await bus.publish(submitted("ns/a"))
        await events.wait_for("pending", workload="ns/a", timeout_s=10)  # handled: now idle
        assert await service.statuses_for(2.0, service=LIVENESS) == [SERVING]
    assert "stalled" not in service.log.read_text()


async def test_with_stall_seconds_0_a_wedged_handler_leaves_liveness_serving(
    nats_server: str, tmp_path: Path, bus: Bus, events: EventLog
) -> None:
    async with tiny_service(nats_server, tmp_path, "--stall-seconds", "0") as service:
        await service.wait_for_status(SERVING)
        await bus.publish(submitted("ns/hang"))
        await events.wait_for("running", workload="ns/hang", timeout_s=10)
        assert await service.statuses_for(2.0, service=LIVENESS) == [SERVING]  # not judged
