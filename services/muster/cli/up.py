"""`muster up`, `muster down`, `muster status`: a local stack that stays up.

`up` starts, in the background, a loopback NATS server, every service on a simulated cluster
whose Nodes come from `--nodes FILE` (four nodes by default; with MUSTER_CLUSTER_BACKEND=kube
the services' API server instead, named with the Nodes it has), and the dashboard, on fixed
ports (gateway 127.0.0.1:50051, NATS 4222, dashboard 8080; `--gateway-port` and friends, or
their MUSTER_UP_* variables, move them; 0 picks free ones), then prints where everything is
and returns. `down` stops it, also after a crash (the recorded processes that still run, and
the rest of its supervisor's process group: those started before being recorded). `status`
says what runs, with each process's restarts and last exit (the supervisor starts
again what exits, `muster.launcher.upkeep`): exit 0 when everything runs, 1 when something
does not (died with its supervisor, or waits out its back-off, or the stack is still
starting), 3 when no stack is up. State lives in the per-user state directory
(`muster.launcher.upstate`). While one `up` starts the stack, a second one in the same
directory says so (the supervisor's pid) and waits for it; `down` then stops the start.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final
from urllib.request import urlopen

from muster.cli.health import serving
from muster.launcher.upkeep import START_DEADLINE_S
from muster.launcher.upstate import (
    DEFAULT_PORTS,
    Process,
    StackState,
    alive,
    distrusted,
    group_of,
    leftovers,
    port_in_use,
    process,
    read_state,
    remove_state,
    state_dir,
    terminate,
)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_NOT_UP = 0, 1, 2, 3
START_TIMEOUT_S: Final = 90.0
PORT_FLAGS: Final = (
    ("--gateway-port", "gateway", "MUSTER_UP_GATEWAY_PORT"),
    ("--nats-port", "nats", "MUSTER_UP_NATS_PORT"),
    ("--dashboard-port", "dashboard", "MUSTER_UP_DASHBOARD_PORT"),
    ("--metrics-port", "metrics", "MUSTER_UP_METRICS_PORT"),
)
SERVICES_STARTED: Final = 7  # one cluster: sim-cluster ... gateway (their metrics ports)
UP_CLUSTER: Final = "local"  # the one cluster `muster up` serves
SHOWN_NODES: Final = 8  # named in what `up` prints; the others are counted


def add_parsers(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    up = commands.add_parser(
        "up",
        help="start NATS, every service and the dashboard in the background",
        description="Start a local muster in the background: NATS, every service on a "
        "simulated cluster, and the dashboard, on fixed loopback ports; stop it with "
        "`muster down`.",
    )
    _state_option(up)
    for flag, name, env in PORT_FLAGS:
        default = int(os.environ.get(env) or DEFAULT_PORTS[name])
        up.add_argument(
            flag, type=int, default=default, metavar="PORT", help=f"({env}, default {default})"
        )
    up.add_argument("--nodes", metavar="FILE", help="the cluster's Nodes (YAML); default: 4")
    up.add_argument("--speed", type=float, default=1.0, help="pods run X times faster (default 1)")
    up.add_argument(
        "--start-deadline",
        type=float,
        default=START_DEADLINE_S,
        metavar="SECONDS",
        help="a restarted service or dashboard that does not serve by then is killed and "
        f"started again after its back-off (default {START_DEADLINE_S:g})",
    )
    up.add_argument("--supervise", action="store_true", help=argparse.SUPPRESS)
    up.set_defaults(handler=handle_up)
    down = commands.add_parser("down", help="stop what `muster up` started")
    _state_option(down)
    down.set_defaults(handler=handle_down)
    status = commands.add_parser("status", help="say what `muster up` started and what runs")
    _state_option(status)
    status.set_defaults(handler=handle_status)


def _state_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where the stack's state and logs are (MUSTER_STATE_DIR; default "
        "$XDG_STATE_HOME/muster or ~/.local/state/muster)",
    )


# --- up ---------------------------------------------------------------------------------


def handle_up(args: argparse.Namespace) -> int:
    directory = state_dir(args.state_dir)
    if args.supervise:
        return _supervise(args, directory)
    problem = _check_up_args(args) or _distrusted(directory)
    if problem:
        print(f"muster up: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    state = read_state(directory)
    if state is not None and alive(state.supervisor) and not state.ready:
        return _wait_for_other(state, directory)
    if state is not None and alive(state.supervisor):
        print("muster is already up.")
        print(describe(state))
        return EXIT_OK
    if state is not None:  # a stack that crashed: stop what is left of it first
        terminate(leftovers(state))
        remove_state(directory)
    busy = [f"{flag} {getattr(args, flag[2:].replace('-', '_'))}" for flag, _, _ in PORT_FLAGS]
    busy = [b for b in busy if _busy(int(b.split()[1]))]
    first = args.metrics_port
    busy += [
        f"metrics port {first + i}"
        for i in range(1, SERVICES_STARTED)
        if _busy(first and first + i)
    ]
    if busy:
        print(
            f"muster up: in use: {', '.join(busy)}; choose other ports (0: any free one)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return _start(args, directory)


def _distrusted(directory: Path) -> str:
    """Why the state directory is not used (`upstate.distrusted`), as one line; "" if it is."""
    why = distrusted(directory)
    return f"not using the state directory: {why}; choose another with --state-dir" if why else ""


def _check_up_args(args: argparse.Namespace) -> str:
    for flag, _, _ in PORT_FLAGS:
        port = getattr(args, flag[2:].replace("-", "_"))
        if not 0 <= port <= 65535:
            return f"{flag}: must be 0..65535, got {port}"
    if not args.speed > 0:
        return f"--speed: must be > 0, got {args.speed:g}"
    if not args.start_deadline > 0:
        return f"--start-deadline: must be > 0, got {args.start_deadline:g}"
    from muster.launcher.up_cluster import up_backend  # the kubernetes client: only for `up`

    try:
        kube = up_backend(UP_CLUSTER).kind == "kube"
    except ValueError as exc:
        return str(exc)
    if args.nodes and kube:
        return (
            f"--nodes {args.nodes}: the simulated cluster's Nodes; with "
            "MUSTER_CLUSTER_BACKEND=kube the cluster is the API server's, with the Nodes it has"
        )
    if args.nodes and not Path(args.nodes).is_file():
        return f"--nodes {args.nodes}: no such file"
    return ""


def _busy(port: int) -> bool:
    return port != 0 and port_in_use(port)


def _start(args: argparse.Namespace, directory: Path) -> int:
    """Start the supervisor detached (its own session: it outlives this command and the
    terminal), then wait until it says the stack is ready, or why not."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    (directory / "logs").mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "muster.cli.main", "up", "--supervise"]
    argv += ["--state-dir", str(directory), "--speed", f"{args.speed:g}"]
    argv += ["--start-deadline", f"{args.start_deadline:g}"]
    for flag, _, _ in PORT_FLAGS:
        argv += [flag, str(getattr(args, flag[2:].replace("-", "_")))]
    if args.nodes:
        argv += ["--nodes", str(Path(args.nodes).resolve())]
    with (directory / "logs" / "up.log").open("ab") as log:
        supervisor = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    try:
        return _wait_until_up(supervisor, directory)
    except KeyboardInterrupt:  # Ctrl-C: what was starting is stopped, not left running
        supervisor.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            supervisor.wait(timeout=60)
        if supervisor.poll() is None:  # its state names what runs: `down` stops it
            print("muster up: interrupted; still stopping: run `muster down`", file=sys.stderr)
        else:
            remove_state(directory)
            print("muster up: interrupted; stopped what it had started", file=sys.stderr)
        return EXIT_FAILED


def _wait_until_up(supervisor: subprocess.Popen[bytes], directory: Path) -> int:
    """Wait until the supervisor says the stack is ready (print where it is), or why not."""
    outcome, state = _await_start(directory, supervisor.pid, lambda: supervisor.poll() is not None)
    if outcome == "ready":
        print(describe(state))
        return EXIT_OK
    if outcome == "error":
        supervisor.wait(timeout=30)
        remove_state(directory)
        print(f"muster up: {state.error}", file=sys.stderr)
        return EXIT_FAILED
    if outcome == "exited":
        print(f"muster up: failed; see {directory / 'logs' / 'up.log'}", file=sys.stderr)
        return EXIT_FAILED
    supervisor.terminate()
    print(f"muster up: not ready in {START_TIMEOUT_S:g}s; see {directory}/logs", file=sys.stderr)
    return EXIT_FAILED


def _wait_for_other(starting: StackState, directory: Path) -> int:
    """Another `muster up` is starting the stack in `directory`: wait for it as that one
    does, and say how it ended. Its start is never cut short from here: the other command
    (or `muster down`) owns it."""
    pid = starting.supervisor.pid
    print(
        f"muster is starting (supervisor pid {pid}, by another `muster up`); waiting until "
        "it is up (Ctrl-C stops waiting, not the start)",
        flush=True,
    )
    log = directory / "logs" / "up.log"
    try:
        outcome, state = _await_start(directory, pid, lambda: not alive(starting.supervisor))
    except KeyboardInterrupt:
        print(f"muster up: stopped waiting; supervisor pid {pid} still starts", file=sys.stderr)
        return EXIT_FAILED
    if outcome == "ready":
        print(describe(state))
        return EXIT_OK
    if outcome == "error":
        print(
            f"muster up: the start by supervisor pid {pid} failed: {state.error}", file=sys.stderr
        )
    elif outcome == "exited":
        print(
            f"muster up: the stack that was starting (supervisor pid {pid}) stopped before "
            f"it was up; see {log}",
            file=sys.stderr,
        )
    else:
        print(
            f"muster up: supervisor pid {pid} not up in {START_TIMEOUT_S:g}s; see {log}, "
            "or stop it with `muster down`",
            file=sys.stderr,
        )
    return EXIT_FAILED


def _await_start(directory: Path, pid: int, exited: Callable[[], bool]) -> tuple[str, StackState]:
    """("ready" or "error", the state then) once supervisor `pid` records either; ("exited",
    the state last read) when it exits first; ("timeout", ...) after START_TIMEOUT_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last = StackState(supervisor=Process(name="supervisor", pid=pid, started=0))
    while time.monotonic() < deadline:
        state = read_state(directory)
        if state is not None and state.supervisor.pid == pid:
            last = state
            if state.ready or state.error:
                return ("ready" if state.ready else "error"), state
        if exited():
            return "exited", last
        time.sleep(0.1)
    return "timeout", last


def _supervise(args: argparse.Namespace, directory: Path) -> int:
    from muster.bus.service import run_loop  # NATS and gRPC: only in the supervisor
    from muster.launcher.up import DEFAULT_NODES, UpConfig, supervise

    nodes = Path(args.nodes).read_text() if args.nodes else DEFAULT_NODES
    config = UpConfig(
        cluster=UP_CLUSTER,
        state_dir=directory,
        gateway_port=args.gateway_port,
        nats_port=args.nats_port,
        dashboard_port=args.dashboard_port,
        metrics_port=args.metrics_port,
        nodes_yaml=nodes,
        speed=args.speed,
        start_deadline_s=args.start_deadline,
    )
    try:
        status: int = run_loop(supervise(config))
    finally:
        _stop_own_group()
    return status


def _stop_own_group() -> None:
    """SIGKILL whatever of this supervisor's process group still runs: it stopped its stack,
    so anything left is a child it lost track of (a start cut short, a stop that failed).
    Only as the leader of its own session, as `muster up` starts it."""
    if os.getsid(0) != os.getpid():
        return
    me = process("supervisor", os.getpid())
    for pid in group_of(me):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def describe(state: StackState) -> str:
    """Where everything is, and how to stop it."""
    nodes = ", ".join(state.nodes[:SHOWN_NODES]) + ", ..." * (len(state.nodes) > SHOWN_NODES)
    if state.api_server:
        cluster = (
            f"  cluster    {state.cluster}: the Kubernetes API server {state.api_server}, "
            f"{len(state.nodes)} Nodes ({nodes or 'none yet'})\n"
        )
    else:
        cluster = (
            f"  cluster    {state.cluster}: {len(state.nodes)} simulated nodes ({nodes}), "
            f"pods at {state.speed:g}x speed\n"
        )
    return (
        f"muster is up (supervisor pid {state.supervisor.pid}; logs in {state.log_dir})\n"
        f"  gateway    {state.gateway}   muster submit|queues|workloads|events call it\n"
        f"  dashboard  {state.dashboard}\n"
        f"  NATS       {state.nats}   (one user per service)\n"
        f"  metrics    {_metrics(state)}\n"
        f"{cluster}"
        "Stop it with: muster down"
    )


def _metrics(state: StackState) -> str:
    """ "http://127.0.0.1:9400/metrics (sim-cluster) ... :9406 (gateway)", or where each is."""
    found = [(p.name, p.metrics) for p in state.processes if p.metrics]
    if not found:
        return "-"
    return f"http://{found[0][1]}/metrics ({found[0][0]}) ... {found[-1][1]} ({found[-1][0]})"


# --- down -------------------------------------------------------------------------------


def handle_down(args: argparse.Namespace) -> int:
    directory = state_dir(args.state_dir)
    if problem := _distrusted(directory):
        print(f"muster down: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    state = read_state(directory)
    if state is None:
        print("muster is not up.")
        return EXIT_OK
    crashed = not alive(state.supervisor)
    starting = not crashed and not state.ready
    if not crashed:
        terminate([state.supervisor], grace_s=60.0)  # it stops its services in order
    # Also those of a supervisor killed while it started them, before it recorded them.
    left = terminate(leftovers(state))
    remove_state(directory)
    if crashed:
        print(f"muster was down already (it had crashed); stopped what was left: {len(left)}")
    else:
        print("muster is down (it was still starting)." if starting else "muster is down.")
    return EXIT_OK


# --- status -----------------------------------------------------------------------------


def handle_status(args: argparse.Namespace) -> int:
    directory = state_dir(args.state_dir)
    if problem := _distrusted(directory):
        print(f"muster status: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    state = read_state(directory)
    if state is not None and not state.ready and alive(state.supervisor):
        print(
            f"muster is starting (supervisor pid {state.supervisor.pid}; "
            f"{len(state.processes)} processes started so far; logs in {state.log_dir}); "
            "`muster up` waits until it is up"
        )
        return EXIT_FAILED
    if state is None or not state.ready:
        print("muster is not up.")
        return EXIT_NOT_UP
    now = time.time()
    # Where each one's health is asked: a service's gRPC health port, not its clients' port
    # (the gateway's is on the last line), so the column does not say ADDRESS.
    rows = [("COMPONENT", "PID", "HEALTH CHECK", "STATE", "RESTARTS", "LAST EXIT", "METRICS")]
    down = 0
    supervisor = "running" if alive(state.supervisor) else "exited"
    rows.append(("supervisor", str(state.supervisor.pid), "-", supervisor, "-", "-", "-"))
    for p in state.processes:
        health = _health(p.kind, p.address) if alive(p) else _waiting(p, supervisor, now)
        down += health != "running"
        restarts, last_exit = restarts_and_last_exit(p, now)
        rows.append(
            (p.name, str(p.pid), p.address or "-", health, restarts, last_exit, p.metrics or "-")
        )
    down += supervisor != "running"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    print(f"gateway {state.gateway}, dashboard {state.dashboard}")
    return EXIT_FAILED if down else EXIT_OK


def _waiting(p: Process, supervisor: str, now: float) -> str:
    """A process that does not run: in its back-off before a restart (kubectl's
    CrashLoopBackOff), or exited for good (its supervisor is gone)."""
    if supervisor == "running" and p.back_off_until:
        return f"back-off {max(p.back_off_until - now, 0):.0f}s"
    return "exited"


def restarts_and_last_exit(p: Process, now: float) -> tuple[str, str]:
    """As `kubectl get pods` shows restarts, "1 (12s ago)", and the last exit as its status
    and reason: "-9 (SIGKILL)", "1 (Error)", "0 (Completed)", "-9 (not ready in 120s)" for a
    start killed at its deadline; "-" when it never exited."""
    if p.last_exit_at == 0.0:
        return str(p.restarts), "-"
    ago = f"{p.restarts} ({_age(now - p.last_exit_at)} ago)"
    status = p.last_exit
    if status is None:
        return ago, "? (did not start)"
    if p.last_exit_why:  # killed by its supervisor: the signal would not say why
        return ago, f"{status} ({p.last_exit_why})"
    if status < 0:
        with contextlib.suppress(ValueError):
            return ago, f"{status} ({signal.Signals(-status).name})"
        return ago, f"{status} (signal {-status})"
    return ago, f"{status} ({'Completed' if status == 0 else 'Error'})"


def _age(seconds: float) -> str:
    """kubectl's short age: 42s, 3m5s, 2h4m, 3d4h."""
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s % 60 and s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m" if s % 3600 // 60 else f"{s // 3600}h"
    return f"{s // 86400}d{s % 86400 // 3600}h" if s % 86400 // 3600 else f"{s // 86400}d"


def _health(kind: str, address: str) -> str:
    """running, or unhealthy: a service's gRPC health, NATS's port, the dashboard's /healthz."""
    try:
        if kind == "dashboard":
            with urlopen(f"{address}/healthz", timeout=2) as reply:  # our URL
                return "running" if reply.status == 200 else "unhealthy"
        if kind == "nats":
            host, port = address.removeprefix("nats://").rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=2):
                return "running"
        return "running" if not address or serving(address) else "unhealthy"
    except OSError:
        return "unhealthy"
