"""`muster up`, `status` and `down` run while another `muster up` is still starting its stack
in the same state directory: they say so, naming its supervisor, and `up` waits for it.

The supervisor stands in as a plain process recorded in a state file that is not ready yet;
the test then plays what a real supervisor writes (ready, or the error it stopped on) once
the second `up` has said that it waits, so nothing depends on a clock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from muster.launcher.upstate import StackState, alive, process, read_state, write_state

pytestmark = pytest.mark.timeout(60)

MUSTER = [sys.executable, "-m", "muster.cli.main"]


@pytest.fixture
def starting(tmp_path: Path) -> Iterator[StackState]:
    """A state directory whose stack is starting: its supervisor runs, nothing is ready."""
    supervisor = subprocess.Popen(["sleep", "120"], start_new_session=True)
    state = StackState(
        supervisor=process("supervisor", supervisor.pid), log_dir=str(tmp_path / "logs")
    )
    write_state(tmp_path, state)
    yield state
    supervisor.kill()
    supervisor.wait()


def run(directory: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MUSTER, *argv, "--state-dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(),
        check=False,
    )


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MUSTER_")}


def start_up(directory: Path) -> subprocess.Popen[str]:
    """`muster up`, once it has said that it waits for the stack that is starting."""
    up = subprocess.Popen(
        [
            *MUSTER,
            "up",
            "--state-dir",
            str(directory),
            "--gateway-port",
            "0",
            "--nats-port",
            "0",
            "--dashboard-port",
            "0",
            "--metrics-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert up.stdout is not None
    first = up.stdout.readline()
    assert "is starting" in first, first + up.communicate()[1]
    return up


def test_up_waits_for_the_stack_that_is_starting_and_says_where_it_is(
    tmp_path: Path, starting: StackState
) -> None:
    pid = starting.supervisor.pid
    up = start_up(tmp_path)
    starting.ready, starting.gateway = True, "127.0.0.1:50999"
    write_state(tmp_path, starting)
    out, err = up.communicate(timeout=30)
    assert up.returncode == 0, err
    assert f"muster is up (supervisor pid {pid}" in out
    assert "127.0.0.1:50999" in out
    assert alive(starting.supervisor)  # waited for, never stopped


def test_up_says_why_the_start_it_waited_for_failed(tmp_path: Path, starting: StackState) -> None:
    up = start_up(tmp_path)
    starting.error = "stopped by SIGTERM before it was up"
    write_state(tmp_path, starting)
    _, err = up.communicate(timeout=30)
    assert up.returncode == 1
    assert f"pid {starting.supervisor.pid}" in err
    assert "stopped by SIGTERM before it was up" in err


def test_up_says_the_start_it_waited_for_stopped(tmp_path: Path, starting: StackState) -> None:
    up = start_up(tmp_path)
    os.kill(starting.supervisor.pid, signal.SIGKILL)
    _, err = up.communicate(timeout=30)
    assert up.returncode == 1
    assert f"supervisor pid {starting.supervisor.pid}" in err
    assert "up.log" in err


def test_status_while_starting_names_the_supervisor(tmp_path: Path, starting: StackState) -> None:
    done = run(tmp_path, "status")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith(
        f"muster is starting (supervisor pid {starting.supervisor.pid};"
    ), done.stdout


def test_down_while_starting_stops_it_and_says_it_was_starting(
    tmp_path: Path, starting: StackState
) -> None:
    done = run(tmp_path, "down")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("muster is down (it was still starting)"), done.stdout
    assert not alive(starting.supervisor)
    assert read_state(tmp_path) is None
