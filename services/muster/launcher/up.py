"""`muster up`'s supervisor: NATS, every service and the dashboard, kept up until `muster down`.

`supervise(config)` runs in a process of its own (started detached by `muster up`): it
starts a loopback NATS server with one user per service on a fixed port, every service of one
simulated cluster (the gateway on a fixed port), puts the cluster's Nodes in its store, starts
the dashboard, records everything in the state directory (`upstate`) and waits for SIGTERM
(`muster down`); then it stops everything in reverse order and removes its state, keeping the
logs. A service that dies stays dead (`muster status` shows it): the supervisor does not hide
a crash by restarting it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from muster.api import load_yaml
from muster.bus.permissions import Deployment
from muster.cluster.sim.backend import SimBackend
from muster.launcher.nats_server import LaunchError, NatsServer
from muster.launcher.run import prepare_nats
from muster.launcher.stack import Stack
from muster.launcher.upstate import (
    StackState,
    process,
    read_state,
    remove_state,
    write_state,
)

# Four nodes, two with GPUs, none tainted: room for k8s/examples/ and a few more.
DEFAULT_NODES: Final = "---\n".join(
    f"""\
apiVersion: v1
kind: Node
metadata:
  name: node-{i}
  labels: {{kubernetes.io/hostname: node-{i}}}
status:
  allocatable: {{cpu: "8", memory: 32Gi, ephemeral-storage: 100Gi, pods: "110"{gpus}}}
  conditions: [{{type: Ready, status: "True"}}]
"""
    for i, gpus in ((1, ""), (2, ""), (3, ', nvidia.com/gpu: "2"'), (4, ', nvidia.com/gpu: "2"'))
)
DASHBOARD_START_S: Final = 30.0
STATE_CHECK_S: Final = 2.0  # how often the supervisor checks that its state file names it
_COPYING: set[asyncio.Task[None]] = set()  # the dashboard's output into its log


@dataclass(frozen=True)
class UpConfig:
    state_dir: Path
    gateway_port: int
    nats_port: int
    dashboard_port: int
    nodes_yaml: str
    metrics_port: int = 0  # the first service's; the others follow in start order
    speed: float = 1.0
    cluster: str = "local"


def nodes_of(text: str, *, source: str) -> list[dict[str, Any]]:
    """The Nodes of a nodes file; ValueError with one line per problem (object and field)."""
    documents, problem = load_yaml(text, source=source)
    if problem is not None:
        raise ValueError(str(problem))
    nodes, problems = [], []
    for i, doc in enumerate(d for d in documents if d is not None):
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or doc.get("kind") != "Node":
            problems.append(f"{source}: document {i + 1}: kind: must be Node")
        elif not isinstance(name, str) or not name:
            problems.append(f"{source}: document {i + 1}: metadata.name: is required")
        else:
            nodes.append(doc)
    if not nodes and not problems:
        problems.append(f"{source}: no Node in it")
    if problems:
        raise ValueError("\n".join(problems))
    return nodes


async def supervise(config: UpConfig) -> int:
    """Start the stack, record it, serve until SIGTERM or SIGINT, stop it; the exit status."""
    log_dir = config.state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    store = config.state_dir / "jetstream"
    shutil.rmtree(store, ignore_errors=True)  # a new stack: no events of an old one
    state = StackState(supervisor=process("supervisor", os.getpid()), log_dir=str(log_dir))
    write_state(config.state_dir, state)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    deployment = Deployment(clusters=(config.cluster,), simulated=(config.cluster,))
    # Its children outlive a crashed supervisor: `muster status` shows it, `muster down` ends them.
    nats = NatsServer(store, deployment=deployment, port=config.nats_port, outlive_launcher=True)
    stack: Stack | None = None
    dashboard: asyncio.subprocess.Process | None = None
    try:
        nats_url = await nats.start(log_path=log_dir / "nats-server.log")
        admin = await prepare_nats(nats_url, nats, deployment)
        try:
            stack = Stack(
                nats_url=nats_url,
                cluster=config.cluster,
                shards=1,
                speed=config.speed,
                log_dir=log_dir,
                passwords=nats.passwords,
                gateway_listen=f"127.0.0.1:{config.gateway_port}",
                metrics_ports=config.metrics_port,
                outlive_launcher=True,
            )
            await stack.start()
            nodes = await _apply_nodes(admin, config)
        finally:
            await admin.close()
        dashboard, dashboard_url = await _start_dashboard(config, stack.gateway_address, log_dir)
        state = _ready_state(state, config, nats, stack, nodes, dashboard, dashboard_url)
        write_state(config.state_dir, state)
        await _until_stopped(stop, config.state_dir)
        return 0
    except (LaunchError, OSError, ValueError) as exc:
        state.error = str(exc)
        write_state(config.state_dir, state)
        return 1
    finally:
        if dashboard is not None and dashboard.returncode is None:
            dashboard.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(dashboard.wait(), 10)
        if stack is not None:
            await stack.stop()
        await nats.stop()
        shutil.rmtree(store, ignore_errors=True)  # its passwords go with it
        if not state.error:
            remove_state(config.state_dir)


async def _until_stopped(stop: asyncio.Event, directory: Path) -> None:
    """Wait for SIGTERM; or stop when the state file no longer names this process (its
    directory was removed or another stack took it): nothing could find this stack then, and
    a stack nobody can stop must not live on."""
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STATE_CHECK_S):
                await stop.wait()
                return
        state = read_state(directory)
        if state is None or state.supervisor.pid != os.getpid():
            return


async def _apply_nodes(admin: Any, config: UpConfig) -> list[str]:
    backend = await SimBackend.open(admin.kv, cluster=config.cluster)
    try:
        nodes = nodes_of(config.nodes_yaml, source="nodes")
        for node in nodes:
            await backend.apply(node)
    finally:
        await backend.close()
    return [str(n["metadata"]["name"]) for n in nodes]


async def _start_dashboard(
    config: UpConfig, gateway: str, log_dir: Path
) -> tuple[asyncio.subprocess.Process, str]:
    """Start `muster service dashboard`; wait until it says where it listens."""
    argv = [
        sys.executable,
        *("-m", "muster.cli.main", "service", "dashboard"),
        *("--listen", f"127.0.0.1:{config.dashboard_port}", "--gateway", gateway),
    ]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    assert proc.stdout is not None
    log = (log_dir / "dashboard.log").open("ab")
    try:
        async with asyncio.timeout(DASHBOARD_START_S):
            async for line in proc.stdout:
                log.write(line)
                log.flush()
                if line.startswith(b"dashboard: "):
                    url = line.split(b" ", 1)[1].strip().decode()
                    copying = asyncio.create_task(_copy(proc, log))  # ends with the process
                    _COPYING.add(copying)
                    copying.add_done_callback(_COPYING.discard)
                    return proc, url
    except TimeoutError:
        pass
    log.close()
    raise LaunchError(f"the dashboard did not start; see {log_dir / 'dashboard.log'}")


async def _copy(proc: asyncio.subprocess.Process, log: Any) -> None:
    assert proc.stdout is not None
    with log:
        async for line in proc.stdout:
            log.write(line)
            log.flush()


def _ready_state(
    state: StackState,
    config: UpConfig,
    nats: NatsServer,
    stack: Stack,
    nodes: Sequence[str],
    dashboard: asyncio.subprocess.Process,
    dashboard_url: str,
) -> StackState:
    processes = []
    if nats.process is not None:
        processes.append(process("nats-server", nats.process.pid, address=nats.url, kind="nats"))
    for svc in stack.services:
        if svc.process is not None:
            health = svc.addresses.get("health", "")
            started = process(svc.name, svc.process.pid, address=health)
            started.metrics = svc.addresses.get("metrics", "")
            processes.append(started)
    processes.append(process("dashboard", dashboard.pid, address=dashboard_url, kind="dashboard"))
    state.ready = True
    state.gateway = stack.gateway_address
    state.dashboard = dashboard_url
    state.nats = nats.url
    state.cluster = config.cluster
    state.nodes = list(nodes)
    state.speed = config.speed
    state.processes = processes
    return state
