"""`muster.launcher.upstate`: what a state file left by a dead supervisor still names, and
what it no longer may."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from muster.launcher.upstate import (
    Process,
    StackState,
    alive,
    leftovers,
    process,
    recorded_gateway,
    write_state,
)

# A group leader that starts a sleeper in its group, says its pid, and exits: a supervisor
# SIGKILLed after starting a child it had not recorded yet.
_LEADER = (
    "import subprocess, sys; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
    "print(child.pid, flush=True)"
)


@pytest.fixture
def orphan() -> Iterator[tuple[Process, Process]]:
    """(the dead leader, as recorded while it ran; its child, still running in its group)."""
    leader = subprocess.Popen(
        [sys.executable, "-c", _LEADER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    recorded = process("supervisor", leader.pid)
    assert leader.stdout is not None
    child = process("sleeper", int(leader.stdout.readline()))
    leader.wait()
    try:
        yield recorded, child
    finally:
        if alive(child):
            os.kill(child.pid, signal.SIGKILL)


def test_leftovers_of_a_dead_supervisor_include_a_child_it_never_recorded(
    orphan: tuple[Process, Process],
) -> None:
    supervisor, child = orphan
    assert not alive(supervisor)
    found = leftovers(StackState(supervisor=supervisor))
    assert [p.pid for p in found] == [child.pid]


def test_leftovers_skip_a_recorded_pid_now_another_process_and_a_reused_group(
    orphan: tuple[Process, Process],
) -> None:
    _, child = orphan
    reused = Process(name="gateway", pid=child.pid, started=child.started - 1)
    # A supervisor whose pid is another process now: the group of that pid is not ours.
    me = process("pytest", os.getpid())
    other = Process(name="supervisor", pid=me.pid, started=me.started - 1)
    assert leftovers(StackState(supervisor=other, processes=[reused])) == []


def test_client_commands_ignore_a_state_file_whose_supervisor_is_gone(
    orphan: tuple[Process, Process], tmp_path: Path
) -> None:
    supervisor, _ = orphan
    state = StackState(supervisor=supervisor, ready=True, gateway="127.0.0.1:50051")
    write_state(tmp_path, state)
    assert recorded_gateway(tmp_path) == (
        "",
        f"ignoring {tmp_path / 'stack.json'}: its supervisor (pid {supervisor.pid}) is not "
        "running; `muster down` clears it",
    )
    state.supervisor = process("supervisor", os.getpid())
    write_state(tmp_path, state)
    assert recorded_gateway(tmp_path) == ("127.0.0.1:50051", "")
