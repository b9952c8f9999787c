"""`muster up`'s supervisor: NATS, every service and the dashboard, kept up until `muster down`.

`supervise(config)` runs in a process of its own (started detached by `muster up`): it
starts a loopback NATS server with one user per service on a fixed port, every service of one
simulated cluster (the gateway on a fixed port), puts the cluster's Nodes in its store (with
MUSTER_CLUSTER_BACKEND=kube: no simulator, the API server's Nodes, `up_cluster`), starts
the dashboard, records everything in the state directory (`upstate`) and waits for SIGTERM
(`muster down`); then it stops everything in reverse order and removes its state, keeping the
logs. A service or the dashboard that exits meanwhile is started again after a back-off, as
Kubernetes restarts a container (`muster.launcher.upkeep`): admission exits by design when it
loses its shard lease and counts on that. A service whose liveness says it stalled is stopped
and started again the same way, as a failing livenessProbe would have it. Nothing is hidden:
each restart and the last exit are recorded for `muster status` (RESTARTS, LAST EXIT), and
each start keeps its own log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from muster.api import load_yaml
from muster.bus.permissions import Deployment
from muster.cluster.sim.backend import SimBackend
from muster.launcher.nats_server import LaunchError, NatsServer
from muster.launcher.run import prepare_nats
from muster.launcher.stack import (
    PER_CLUSTER,
    SOLE_BINDERS_BOUND_EVENTS,
    SOLE_GATEWAYS_CLAIMS,
    ServiceProcess,
    Stack,
    start_log,
)
from muster.launcher.up_cluster import kube_nodes, up_backend
from muster.launcher.upkeep import START_DEADLINE_S, Exit, Liveness, Running, keep_up, not_alive
from muster.launcher.upstate import (
    Process,
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
Task = asyncio.Task[None]
# Every service but the simulator (its kubelet and store), by kind.
_SERVICES_ON_KUBE: Final = frozenset(
    {*PER_CLUSTER, "admission", "preemption", "gateway"} - {"sim-cluster"}
)
_COPYING: set[Task] = set()  # the dashboard's output into its log


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
    start_deadline_s: float = START_DEADLINE_S  # a restart serves by then or is killed


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
    stop, up, stopped_by = asyncio.Event(), asyncio.Event(), list[str]()
    starting = asyncio.current_task()
    assert starting is not None

    def on_signal(sig: signal.Signals) -> None:
        """Stop: at once while starting (a start cut short stops what it started), after
        `_until_stopped` once up."""
        stopped_by.append(sig.name)
        stop.set()
        if not up.is_set():
            starting.cancel()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before any child starts
        loop.add_signal_handler(sig, on_signal, sig)

    def spawned(name: str, pid: int, kind: str = "service") -> None:
        """Record a child as the stack starts: a supervisor killed before the stack is up
        leaves a state file that names it, for `muster down`. (A restart once up is recorded
        when it serves, `_keep_up`; until then its process group names it.)"""
        if up.is_set():
            return
        state.processes.append(process(name, pid, kind=kind))
        write_state(config.state_dir, state)

    # On Kubernetes (MUSTER_CLUSTER_BACKEND=kube, inherited by every service) no simulator:
    # the API server's Nodes are the cluster's, asked for first so a wrong server is told now.
    backend = up_backend(config.cluster)  # `muster up` checked it before starting this
    kube = backend.kind == "kube"
    simulated = () if kube else (config.cluster,)
    deployment = Deployment(clusters=(config.cluster,), simulated=simulated)
    # Its children outlive a crashed supervisor: `muster status` shows it, `muster down` ends them.
    nats = NatsServer(store, deployment=deployment, port=config.nats_port, outlive_launcher=True)
    stack: Stack | None = None
    dashboard = _Dashboard(config, log_dir)
    keepers: list[Task] = []
    try:
        api_server, nodes = await kube_nodes(backend.kube) if kube else ("", [])
        nats_url = await nats.start(log_path=log_dir / "nats-server.log")
        assert nats.process is not None
        spawned("nats-server", nats.process.pid, "nats")
        admin = await prepare_nats(nats_url, nats, deployment)
        try:
            stack = Stack(
                nats_url=nats_url,
                cluster=config.cluster,
                shards=1,
                speed=config.speed,
                log_dir=log_dir,
                only=_SERVICES_ON_KUBE if kube else None,
                passwords=nats.passwords,
                gateway_listen=f"127.0.0.1:{config.gateway_port}",
                name_claims=SOLE_GATEWAYS_CLAIMS,
                bound_events=SOLE_BINDERS_BOUND_EVENTS,
                metrics_ports=config.metrics_port,
                outlive_launcher=True,
                spawned=_spawned_service(spawned),
            )
            await stack.start()
            if not kube:
                nodes = await _apply_nodes(admin, config)
        finally:
            await admin.close()
        await dashboard.start(stack.gateway_address)
        if stop.is_set():  # a signal whose cancellation something on the way swallowed
            raise asyncio.CancelledError
        up.set()
        state = _ready_state(state, config, nats, stack, nodes, dashboard)
        state.api_server = api_server
        write_state(config.state_dir, state)
        keepers = _keep_up(config, state, stack, dashboard)
        await _until_stopped(stop, config.state_dir)
        return 0
    except asyncio.CancelledError:
        if not stopped_by:
            raise
        starting.uncancel()
        state.error = f"stopped by {stopped_by[0]} before it was up"
        write_state(config.state_dir, state)
        return 1
    except (LaunchError, OSError, ValueError) as exc:
        state.error = str(exc)
        write_state(config.state_dir, state)
        return 1
    finally:
        for keeper in keepers:  # first: what stops next is not to be restarted
            keeper.cancel()
        await asyncio.gather(*keepers, return_exceptions=True)
        await dashboard.stop()
        if stack is not None:
            await stack.stop()
        await nats.stop()
        shutil.rmtree(store, ignore_errors=True)  # its passwords go with it
        if not state.error:
            remove_state(config.state_dir)


def _spawned_service(record: Callable[[str, int], None]) -> Callable[[ServiceProcess], None]:
    def spawned(svc: ServiceProcess) -> None:
        if svc.process is not None:
            record(svc.name, svc.process.pid)

    return spawned


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


class _Dashboard:
    """`muster service dashboard`, started (again) at its port, each start with its own log."""

    def __init__(self, config: UpConfig, log_dir: Path):
        self.config, self.log_dir = config, log_dir
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""
        self.gateway = ""
        self.starts = 0

    async def start(self, gateway: str, *, timeout_s: float | None = DASHBOARD_START_S) -> None:
        """Start it; wait until it says where it listens (LaunchError when it does not, within
        `timeout_s`; None: the caller's deadline). A start that fails is killed: a dashboard
        that hangs at start must not be left running, nor waited on as if it served."""
        self.gateway = gateway
        self.starts += 1
        log_path = start_log(self.log_dir, "dashboard", self.starts)
        argv = [
            sys.executable,
            *("-m", "muster.cli.main", "service", "dashboard"),
            *("--listen", f"127.0.0.1:{self.config.dashboard_port}", "--gateway", gateway),
        ]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        self.process = proc
        log = log_path.open("ab")
        url = ""
        try:
            async with asyncio.timeout(timeout_s):
                url = await _announced(proc, log)
        except TimeoutError:
            pass
        finally:
            if not url:  # it exited, or hangs past `timeout_s` or the caller's deadline
                log.close()
                await _kill(proc)
        if not url:
            raise LaunchError(f"the dashboard did not start; see {log_path}")
        self.url = url
        copying = asyncio.create_task(_copy(proc, log))  # ends with the process
        _COPYING.add(copying)
        copying.add_done_callback(_COPYING.discard)

    def running(self) -> asyncio.subprocess.Process | None:
        return self.process

    async def restart(self) -> None:
        await self.start(self.gateway, timeout_s=None)  # within upkeep's start deadline

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), 10)


async def _announced(proc: asyncio.subprocess.Process, log: Any) -> str:
    """The dashboard's URL, once it prints it, copying its output to `log` meanwhile; "" when
    it exits first."""
    assert proc.stdout is not None
    async for line in proc.stdout:
        log.write(line)
        log.flush()
        if line.startswith(b"dashboard: "):
            return line.split(b" ", 1)[1].strip().decode()
    return ""


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    await proc.wait()


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
    dashboard: _Dashboard,
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
    assert dashboard.process is not None
    processes.append(
        process("dashboard", dashboard.process.pid, address=dashboard.url, kind="dashboard")
    )
    state.ready = True
    state.gateway = stack.gateway_address
    state.dashboard = dashboard.url
    state.nats = nats.url
    state.cluster = config.cluster
    state.nodes = list(nodes)
    state.speed = config.speed
    state.processes = processes
    return state


def _keep_up(
    config: UpConfig, state: StackState, stack: Stack, dashboard: _Dashboard
) -> list[Task]:
    """A task per service and the dashboard that starts it again when it exits (or kills a
    start that hangs past `config.start_deadline_s`), recording each exit and each start in
    the state file."""
    directory = config.state_dir

    def exited(exit: Exit) -> None:
        recorded = _recorded(state, exit.name)
        recorded.last_exit, recorded.last_exit_at = exit.status, exit.at
        recorded.last_exit_why = exit.why
        recorded.back_off_until = exit.restart_at
        write_state(directory, state)

    def restarted(name: str) -> None:
        recorded = _recorded(state, name)
        if name == "dashboard":
            proc, recorded.address = dashboard.process, dashboard.url
            state.dashboard = dashboard.url
        else:
            svc = stack.service(name)
            proc = svc.process
            recorded.address = svc.addresses.get("health", "")
            recorded.metrics = svc.addresses.get("metrics", "")
            if name == "gateway" and "gateway" in svc.addresses:  # moved, if its port was 0
                state.gateway = dashboard.gateway = svc.addresses["gateway"]
        if proc is not None:
            again = process(name, proc.pid)
            recorded.pid, recorded.started = again.pid, again.started
        recorded.restarts += 1
        recorded.back_off_until = 0.0
        write_state(directory, state)

    def keeper(
        name: str,
        running: Running,
        restart: Callable[[], Awaitable[None]],
        liveness: Liveness | None = None,
    ) -> Task:
        return asyncio.create_task(
            keep_up(
                name,
                running,
                restart,
                exited,
                functools.partial(restarted, name),
                start_deadline_s=config.start_deadline_s,
                liveness=liveness,
            ),
            name=f"keep-up-{name}",
        )

    services = [
        keeper(
            svc.name,
            functools.partial(_process_of, svc),
            functools.partial(stack.restart, svc.name),
            functools.partial(not_alive, functools.partial(_health_of, svc)),
        )
        for svc in stack.services
    ]
    return [*services, keeper("dashboard", dashboard.running, dashboard.restart)]


def _process_of(svc: ServiceProcess) -> asyncio.subprocess.Process | None:
    return svc.process


def _health_of(svc: ServiceProcess) -> str:
    """Where its gRPC health is now ("" while it starts: a restart moves it)."""
    return svc.addresses.get("health", "")


def _recorded(state: StackState, name: str) -> Process:
    (found,) = [p for p in state.processes if p.name == name]
    return found
