"""`muster up` stopped by a signal, or failing, at each step of its start leaves nothing
running: no process of its stack, no port taken.

Each test starts `muster up` as a user would and catches its supervisor at a step of the start
(found in /proc: its children, the last service started); what the stack had started then is
asserted gone afterwards, whatever ended it: the supervisor itself, or `muster down`.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from up_stack import IN_THE_FOREGROUND, MUSTER, ROOT, child_running, children_of, up_env

from muster.launcher.nats_server import free_port
from muster.launcher.upstate import Process, alive, port_in_use, process, read_state

pytestmark = pytest.mark.timeout(240)


@dataclass(frozen=True)
class Outcome:
    status: int  # `muster up`'s
    stderr: str  # `muster up`'s
    down: str  # what `muster down` printed, if it ran
    left_running: list[str]  # what was started and still runs, ports still taken


class Starting:
    """`muster up` on two fixed free ports (to check they are given back), running."""

    def __init__(self, directory: Path, *extra: str) -> None:
        self.ports = [free_port(), free_port()]
        self.env = {
            **up_env(directory),
            "MUSTER_UP_GATEWAY_PORT": str(self.ports[0]),
            "MUSTER_UP_NATS_PORT": str(self.ports[1]),
        }
        self.up = subprocess.Popen(  # with SIGINT as a terminal's foreground command has it
            [*IN_THE_FOREGROUND, *MUSTER[1:], "up", *extra],
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.seen: list[Process] = []

    def supervisor(self) -> int:
        return child_running(self.up.pid, "--supervise")

    def services_started(self) -> int:
        """The supervisor's pid once it started every service (the gateway last), noting each
        process it started so far."""
        supervisor = self.supervisor()
        child_running(supervisor, "service\0gateway\0")
        self.seen = [process(f"pid {pid}", pid) for pid in children_of(supervisor)]
        return supervisor

    def outcome(self, act: Callable[[], object], *, then_down: bool = False) -> Outcome:
        """Do `act` to the start, wait for `muster up` (then run `muster down`); whatever
        happens, nothing of it stays on this machine."""
        try:
            act()
            _, err = self.up.communicate(timeout=180)
            down = self.down() if then_down else ""
            left = [
                *(p.name for p in self.seen if alive(p)),
                *(f"port {port}" for port in self.ports if port_in_use(port)),
            ]
        finally:
            self.clean_up()
        return Outcome(status=self.up.returncode, stderr=err, down=down, left_running=left)

    def down(self) -> str:
        done = subprocess.run(
            [*MUSTER, "down"], env=self.env, capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        return done.stdout

    def clean_up(self) -> None:
        """Whatever the test found, nothing of it stays on this machine."""
        if self.up.poll() is None:
            self.up.kill()
            self.up.wait()
        self.down()
        for p in self.seen:
            if alive(p):
                os.kill(p.pid, signal.SIGKILL)


def test_down_stops_a_stack_whose_supervisor_was_killed_while_it_started(
    tmp_path: Path,
) -> None:
    starting = Starting(tmp_path)
    done = starting.outcome(
        lambda: os.kill(starting.services_started(), signal.SIGKILL), then_down=True
    )

    assert done.status == 1
    assert len(starting.seen) == 8  # nats-server, seven services
    assert done.down.startswith(
        "muster was down already (it had crashed); stopped what was left: 8"
    )
    assert done.left_running == []
    assert read_state(tmp_path) is None


def test_a_sigterm_while_starting_stops_what_was_started_and_up_says_so(
    tmp_path: Path,
) -> None:
    starting = Starting(tmp_path)
    done = starting.outcome(lambda: os.kill(starting.services_started(), signal.SIGTERM))

    assert (done.status, done.stderr) == (1, "muster up: stopped by SIGTERM before it was up\n")
    assert done.left_running == []
    assert read_state(tmp_path) is None


def test_a_sigterm_before_the_supervisor_handles_signals_leaves_nothing(
    tmp_path: Path,
) -> None:
    starting = Starting(tmp_path)

    def terminate_at_once() -> None:
        supervisor = starting.supervisor()
        starting.seen = [process("supervisor", supervisor)]
        os.kill(supervisor, signal.SIGTERM)  # still importing, or just past: either way

    done = starting.outcome(terminate_at_once)

    assert done.status == 1
    assert done.left_running == []


def test_a_start_that_fails_half_way_stops_what_it_started(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("kind: Pod\nmetadata: {name: not-a-node}\n")  # found out after services
    starting = Starting(tmp_path / "state", "--nodes", str(nodes))
    done = starting.outcome(starting.services_started)

    assert (done.status, done.stderr) == (
        1,
        "muster up: nodes: document 1: kind: must be Node\n",
    )
    assert done.left_running == []
    assert read_state(tmp_path / "state") is None


def test_ctrl_c_on_a_waiting_muster_up_stops_what_it_had_started(tmp_path: Path) -> None:
    starting = Starting(tmp_path)

    def interrupt() -> None:
        starting.services_started()
        starting.up.send_signal(signal.SIGINT)  # its supervisor, in a session of its own, not

    done = starting.outcome(interrupt)

    assert (done.status, done.stderr) == (
        1,
        "muster up: interrupted; stopped what it had started\n",
    )
    assert done.left_running == []
    assert read_state(tmp_path) is None
