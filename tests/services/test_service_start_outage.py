"""Services outliving NATS at start and at stop (docs/services.md, "Restarts and health").

A nats-server that restarts while a service starts (at each request of its start that used
to end the process with status 1) leaves the service starting again until it serves; a service
told to stop while NATS is unreachable exits 0 without waiting out its reconnections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from admission_world import (
    basic_config,
    cluster_queue,
    eventually,
    flavor,
    local_queue,
    submitted,
    workload,
)
from budget import wait_s
from bus_helpers import EventLog
from nats_cut import StepCut
from nats_process import NatsServer
from test_bus_nats_restart import publish_when_back

from muster.bus import Bus
from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.launcher.stack import Stack

pytestmark = pytest.mark.timeout(120)

# A stopped service exits within this, where it used to take 15-25 s (a grace period spent on
# requests NATS could not answer, then a drain waiting for a reconnection): generous, not a
# performance claim.
STOPS_WITHIN_S = 10.0

# (service, the request of its start that NATS loses, which occurrence of it): each one
# ended the service before (docs/services.md, "Restarts and health"). The streams' own
# `$JS.API.STREAM.INFO.MUSTER_EVENTS` comes first, so the second is the service's own.
STEPS = [
    ("admission", b"$JS.API.STREAM.INFO.MUSTER_EVENTS", 2),  # the rebuild's end
    ("admission", b"$JS.API.STREAM.INFO.OBJ_MUSTER_SNAPSHOTS", 1),  # the snapshot store
    ("admission", b"$JS.API.CONSUMER.CREATE.MUSTER_EVENTS.admission-0", 1),  # its durable
    ("preemption", b"$JS.API.CONSUMER.CREATE.MUSTER_EVENTS.preemption", 1),
    ("binder", b"$JS.API.STREAM.INFO.MUSTER_EVENTS", 2),
    ("gangpermit", b"$JS.API.STREAM.INFO.MUSTER_EVENTS", 2),
    ("watcher", b"$JS.API.CONSUMER.CREATE.KV_MUSTER_WATCHER", 1),  # its marks
    ("watcher", b"$JS.API.STREAM.MSG.GET.KV_MUSTER_WATCHER", 1),  # its revision
    ("watcher", b"$JS.API.STREAM.INFO.MUSTER_EVENTS", 2),  # where its own events end
]

# Kueue's objects as a user submits them (JSON documents are YAML), and a workload of 1 s.
QUEUES = "\n---\n".join(json.dumps(m) for m in (flavor(), cluster_queue(cpu="4"), local_queue()))
WORKLOAD = json.dumps(workload("w", cpu="100m", annotations={"muster.dev/run-seconds": "1"}))
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-0"},
    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
}


@contextlib.asynccontextmanager
async def started(
    nats_url: str, log_dir: Path, only: set[str] | None = None
) -> AsyncIterator[Stack]:
    """The services `only` (None: all) as processes on `nats_url`, each serving."""
    stack = Stack(nats_url=nats_url, cluster="local", shards=1, speed=1, log_dir=log_dir, only=only)
    try:
        await stack.start(stall_s=wait_s(60))
        yield stack
    finally:
        await stack.stop()


@pytest.mark.parametrize(("service", "subject", "occurrence"), STEPS)
async def test_a_service_serves_after_nats_restarted_at_a_step_of_its_start(
    service: str,
    subject: bytes,
    occurrence: int,
    nats_process: NatsServer,
    bus: Bus,
    events: EventLog,
    tmp_path: Path,
) -> None:
    await basic_config(bus, cpu="3")
    cut = StepCut(nats_process, cut_at=subject, occurrence=occurrence)
    async with cut, started(cut.url, tmp_path, only={service}) as stack:
        assert cut.cut.is_set()  # the restart came before it served
        if service == "admission":  # and it decides
            await publish_when_back(bus, [submitted(workload("a", cpu="1"))])
            await events.wait_for("admitted", workload="ns/a", timeout_s=wait_s(20))
        assert stack.died() == []
    (svc,) = stack.services
    log = svc.log_path.read_text()
    # The outage was met: the start began again, or the read that met it (a bucket feed's own
    # pull reader, which rides an outage) read on once NATS was back.
    assert "starting: waiting for NATS (" in log or ": NATS back after " in log, log


async def test_every_service_works_after_nats_restarted_while_they_started(
    nats_process: NatsServer, bus: Bus, events: EventLog, tmp_path: Path
) -> None:
    backend = await SimBackend.connect(nats_process.url, cluster="local")
    await backend.apply(NODE)
    await backend.close()
    # Admission's durable is made after its rebuild: the others are starting too by then.
    cut_at = b"$JS.API.CONSUMER.CREATE.MUSTER_EVENTS.admission-0"
    cut = StepCut(nats_process, cut_at=cut_at)
    async with cut, started(cut.url, tmp_path) as stack:
        assert cut.cut.is_set()
        async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
            gateway = services_pb2_grpc.GatewayStub(channel)
            await gateway.Submit(services_pb2.SubmitRequest(manifest=QUEUES))
            await gateway.Submit(services_pb2.SubmitRequest(manifest=WORKLOAD))
        await events.wait_for("finished", workload="ns/w", timeout_s=wait_s(30))
        assert stack.died() == []


async def exit_status(stack: Stack, name: str) -> int:
    """SIGTERM service `name`; its exit status, once it exited (within STOPS_WITHIN_S)."""
    proc = stack.service(name).process
    assert proc is not None
    proc.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(proc.wait(), STOPS_WITHIN_S)
    except TimeoutError:
        pytest.fail(f"{name} still running {STOPS_WITHIN_S:g}s after SIGTERM with NATS gone")


async def test_a_serving_service_stopped_with_nats_gone_exits_0(
    nats_process: NatsServer, bus: Bus, events: EventLog, tmp_path: Path
) -> None:
    await basic_config(bus, cpu="3")
    async with started(nats_process.url, tmp_path, only={"admission"}) as stack:
        await bus.publish(submitted(workload("a", cpu="1")))
        await events.wait_for("admitted", workload="ns/a", timeout_s=wait_s(20))
        nats_process.stop()
        assert await exit_status(stack, "admission-0") == 0
        nats_process.start()  # for the test's own connection to close
    assert "abandoning in-flight work" in (tmp_path / "admission-0.log").read_text()


async def test_a_service_waiting_for_nats_at_start_stops_on_sigterm(
    nats_process: NatsServer, tmp_path: Path
) -> None:
    cut_at = b"$JS.API.CONSUMER.CREATE.MUSTER_EVENTS.admission-0"
    log = tmp_path / "admission-0.log"
    async with StepCut(nats_process, cut_at=cut_at, start_again=False) as cut:
        stack = Stack(
            nats_url=cut.url, cluster="local", shards=1, speed=1, log_dir=tmp_path,
            only={"admission"},
        )  # fmt: skip
        starting = asyncio.create_task(stack.start(stall_s=wait_s(60)))
        try:

            async def waiting() -> bool:
                assert not starting.done(), "it served, or exited, with NATS down"
                return log.exists() and "starting: waiting for NATS (" in log.read_text()

            await eventually(waiting)  # its start failed, and it is waiting to start again
            assert await exit_status(stack, "admission-0") == 0
        finally:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            await stack.stop()
    assert "stopped while starting" in log.read_text()
