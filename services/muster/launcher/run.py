"""`muster run`'s live mode: NATS, the services, the driver, the report, and a clean stop."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.launcher.driver import Driver, kueue_configuration, render_tracks
from muster.launcher.nats_server import LaunchError, NatsServer
from muster.launcher.stack import Stack

__all__ = ["LaunchError", "run_live"]


async def run_live(
    text: str,
    *,
    about: str,
    nats_url: str | None,
    speed: float,
    shards: int,
    cluster: str,
    until_s: float | None,
    log_dir: Path,
    render_queues: Callable[[services_pb2.QueueStatusResponse], str],
    out: Callable[[str], None] = print,
) -> int:
    """Run `text` (scenario YAML) on the live services; 0 when every workload finished."""
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if main is not None:
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
    nats = None if nats_url is not None else NatsServer(log_dir / "jetstream")
    stack: Stack | None = None
    backend: SimBackend | None = None
    try:
        if nats is not None:
            nats_url = await nats.start(log_path=log_dir / "nats-server.log")
        assert nats_url is not None
        stack = Stack(
            nats_url=nats_url,
            cluster=cluster,
            shards=shards,
            speed=speed,
            log_dir=log_dir,
            admission_args=_kueue_config_args(text, log_dir),
        )
        where = f" (started here, JetStream in {log_dir})" if nats else ""
        out(
            f"muster run: {about}\n  NATS {nats_url}{where}; {len(stack.services)} service "
            f"processes; {speed:g}x speed; logs in {log_dir}"
        )
        await stack.start()
        out(f"  all services healthy; gateway on {stack.gateway_address}\n")
        backend = await SimBackend.connect(nats_url, cluster=cluster)
        driver = Driver(
            gateway=stack.gateway_address,
            speed=speed,
            print_line=out,
            apply_nodes=_node_applier(backend),
        )
        tracks = await driver.run(text, until_s=until_s)
        out("\n" + render_tracks(tracks) + "\n")
        all_done = all(t.outcome == "Finished" for t in tracks)
        out(render_queues(await _queue_status(stack.gateway_address, drained=all_done)))
        died = stack.died()
        if died:
            out(f"muster run: services exited early: {', '.join(died)} (see their logs)")
            return 1
        return 0 if until_s is not None or all_done else 1
    finally:
        if main is not None:
            loop.remove_signal_handler(signal.SIGTERM)
        if backend is not None:
            await backend.close()
        if stack is not None:
            await stack.stop()
        if nats is not None:
            await nats.stop()


def _kueue_config_args(text: str, log_dir: Path) -> list[str]:
    """The scenario's Kueue Configuration, as the admission service reads it: from a file."""
    config = kueue_configuration(text)
    if config is None:
        return []
    path = log_dir / "kueue-config.yaml"
    path.write_text(config)
    return ["--kueue-config", str(path)]


def _node_applier(backend: SimBackend) -> Callable[[Sequence[dict[str, Any]]], Any]:
    async def apply(nodes: Sequence[dict[str, Any]]) -> None:
        for node in nodes:
            await backend.apply(node)

    return apply


async def _queue_status(
    gateway: str, *, drained: bool, settle_s: float = 3.0
) -> services_pb2.QueueStatusResponse:
    """The gateway's queue status; when every workload finished, wait (a little) until the
    admission service has written that nothing is reserved any more."""
    async with grpc.aio.insecure_channel(gateway) as channel:
        stub = services_pb2_grpc.VisibilityStub(channel)
        deadline = asyncio.get_running_loop().time() + settle_s
        while True:
            reply: services_pb2.QueueStatusResponse = await stub.QueueStatus(
                services_pb2.QueueStatusRequest()
            )
            reserving = sum(cq.reserving_workloads for cq in reply.cluster_queues)
            if not drained or reserving == 0 or asyncio.get_running_loop().time() > deadline:
                return reply
            await asyncio.sleep(0.05)
