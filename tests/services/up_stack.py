"""`muster up` for tests: a stack in a state directory of the test's, on free ports.

`start(directory)` runs `muster up` as a user would (with MUSTER_UP_*_PORT=0 and
MUSTER_STATE_DIR, the overrides the README names), reads where it listens from its state file,
and returns the environment that points every client command at it (MUSTER_GATEWAY).
`wait_for_event` waits on the gateway's Events.Watch, never on a clock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.launcher.upstate import StackState, read_state

MUSTER = [sys.executable, "-m", "muster.cli.main"]

# SIGINT as a shell leaves it for the command it runs in the foreground: a test run in the
# background of a non-interactive shell (`pytest &`) has it ignored, and so would its child,
# which Ctrl-C then could not stop. A first Python restores it and becomes the command (exec
# keeps a default disposition). Not a `preexec_fn`: subprocess then forks without exec'ing at
# once, and in a pytest-xdist worker with gRPC loaded the child crashed now and then
# ("epoll_wait error: Bad file descriptor"; muster.launcher.lifeline says why).
IN_THE_FOREGROUND = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
]

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Up:
    directory: Path
    env: dict[str, str]
    state: StackState

    @property
    def gateway(self) -> str:
        return self.state.gateway


def up_env(directory: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MUSTER_STATE_DIR": str(directory),
        "MUSTER_UP_GATEWAY_PORT": "0",
        "MUSTER_UP_NATS_PORT": "0",
        "MUSTER_UP_DASHBOARD_PORT": "0",
        "MUSTER_UP_METRICS_PORT": "0",
    }


def start(directory: Path, *extra: str) -> Up:
    env = up_env(directory)
    done = subprocess.run(
        [*MUSTER, "up", *extra], env=env, capture_output=True, text=True, timeout=150, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    state = read_state(directory)
    assert state is not None, done.stdout
    assert state.ready, done.stdout
    return Up(directory=directory, env={**env, "MUSTER_GATEWAY": state.gateway}, state=state)


def muster(up: Up, *argv: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `muster ARGV` against the stack; with `ok`, fail the test unless it exits 0."""
    done = subprocess.run(
        [*MUSTER, *argv], env=up.env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    if ok:
        assert done.returncode == 0, f"muster {' '.join(argv)}: {done.stdout}{done.stderr}"
    return done


def down(up: Up) -> None:
    subprocess.run([*MUSTER, "down"], env=up.env, capture_output=True, timeout=120, check=False)


def wait_for_event(
    gateway: str, workload_prefix: str, event_type: str, *, after: int = 0, timeout_s: float = 60.0
) -> events_pb2.Envelope:
    """The first `event_type` event, after sequence `after`, of a workload whose key starts
    with `workload_prefix`; DEADLINE_EXCEEDED fails the test."""
    namespace = workload_prefix.split("/", 1)[0]
    request = services_pb2.WatchRequest(
        namespace=namespace, types=[event_type], from_sequence=after + 1
    )
    with grpc.insecure_channel(gateway) as channel:
        call = services_pb2_grpc.EventsStub(channel).Watch(request, timeout=timeout_s)
        env: events_pb2.Envelope
        try:
            for env in call:
                if env.workload.startswith(workload_prefix):
                    return env
        finally:
            call.cancel()
    raise AssertionError(f"the watch ended without {event_type} of {workload_prefix}")


def child_running(parent: int, argv_part: str, *, other_than: int = 0) -> int:
    """The pid of `parent`'s child whose command line holds `argv_part` (NUL-separated),
    once it runs; nothing to wait on but /proc."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in children_of(parent):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue  # gone meanwhile
            if pid != other_than and argv_part in argv:
                return pid
        time.sleep(0.01)
    raise AssertionError(f"no child of {parent} runs {argv_part!r}")


def children_of(parent: int) -> list[int]:
    """The pids of `parent`'s children now."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == parent:
            found.append(int(entry.name))
    return found
