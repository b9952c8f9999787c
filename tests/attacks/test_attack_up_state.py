"""`muster down`, `status` and client commands given a state file someone else wrote or broke.

- A state directory others may write (a shared MUSTER_STATE_DIR): its `stack.json` could name
  this user's processes for `down` to stop, or a gateway for client commands to send this
  user's token to. Before, `down` stopped the process it named and a client command called that
  gateway; now the directory is refused, by name.
- A state file naming another user's process (its pid and true start time) as the
  supervisor: never signalled; before, `down` sent it SIGTERM (as root, it stopped).
- A corrupted state file: "not up", never a traceback.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from muster.cli.client import gateway_address
from muster.cli.main import main as muster
from muster.launcher.upstate import (
    STATE_FILE,
    Process,
    StackState,
    distrusted,
    process,
    start_time,
    write_state,
)

FORGED_GATEWAY = "127.0.0.1:1"
NOBODY = 65534
SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def running(command: list[str], **options: object) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(command, start_new_session=True, **options)  # type: ignore[call-overload]
    try:
        yield child
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this user that muster never started (an editor, a shell)."""
    yield from running(SLEEP)


def forge(directory: Path, supervisor: Process, *, mode: int = 0o700) -> None:
    directory.mkdir(exist_ok=True)
    state = StackState(supervisor=supervisor, ready=True, gateway=FORGED_GATEWAY)
    (directory / STATE_FILE).write_bytes(msgspec.json.encode(state))
    directory.chmod(mode)


def test_down_refuses_a_state_directory_others_may_write(
    tmp_path: Path, bystander: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    forge(shared, process("supervisor", bystander.pid), mode=0o777)

    assert muster(["down", "--state-dir", str(shared)]) == 2
    assert muster(["status", "--state-dir", str(shared)]) == 2

    err = capsys.readouterr().err
    assert f"muster down: not using the state directory: {shared} may be written by others" in err
    assert "choose another with --state-dir" in err
    assert bystander.poll() is None  # still running
    assert (shared / STATE_FILE).exists()  # left for its owner to look at


def test_client_commands_ignore_a_gateway_named_where_others_may_write(
    tmp_path: Path,
    bystander: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shared = tmp_path / "shared"
    forge(shared, process("supervisor", bystander.pid), mode=0o777)
    monkeypatch.setenv("MUSTER_STATE_DIR", str(shared))

    assert gateway_address(argparse.Namespace(gateway=None)) != FORGED_GATEWAY
    assert f"muster: ignoring {shared}: {shared} may be written by" in capsys.readouterr().err


def test_a_state_file_of_another_owner_is_not_read(
    tmp_path: Path, bystander: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    if os.getuid() != 0:
        pytest.skip("only root can give a file to another user")
    directory = tmp_path / "state"
    forge(directory, process("supervisor", bystander.pid))
    os.chown(directory / STATE_FILE, NOBODY, NOBODY)

    assert muster(["down", "--state-dir", str(directory)]) == 2

    assert f"belongs to uid {NOBODY}, not to this user (0)" in capsys.readouterr().err
    assert bystander.poll() is None


@pytest.fixture
def another_users() -> Iterator[subprocess.Popen[bytes]]:
    """A process of another user (root starts one as nobody)."""
    if os.getuid() != 0:
        pytest.skip("only root can start another user's process")
    yield from running(["sleep", "120"], user=NOBODY, group=NOBODY, cwd="/")


def test_down_never_signals_another_users_process(
    tmp_path: Path, another_users: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    started = start_time(another_users.pid)
    assert started is not None
    directory = tmp_path / "state"
    forge(directory, Process(name="supervisor", pid=another_users.pid, started=started))

    assert muster(["down", "--state-dir", str(directory)]) == 0

    assert "muster was down already" in capsys.readouterr().out
    assert another_users.poll() is None  # not signalled
    assert not (directory / STATE_FILE).exists()


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff garbage",
        b"[]",
        b'{"supervisor": {"name": "s", "pid": "1", "started": 0}}',
        b'{"supervisor": {"name": "s", "pid": -1, "started": 0}, "ready": true}',
        b'{"supervisor": {"name": "s", "pid": 0, "started": 0}, "ready": true}',
        b'{"supervisor": {"name": "s", "pid": 99999999999, "started": 1}, "ready": true}',
    ],
)
def test_a_corrupted_state_file_reads_as_not_up(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    (directory / STATE_FILE).write_bytes(content)

    # 3: not up; 1: a stack whose supervisor is gone (its table says "exited")
    assert muster(["status", "--state-dir", str(directory)]) in (1, 3)
    assert muster(["down", "--state-dir", str(directory)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_the_state_file_is_written_for_this_user_only(tmp_path: Path) -> None:
    """Under a umask of 002 or 000 too: a state file others may write would be refused."""
    directory = tmp_path / "state"
    old = os.umask(0)
    try:
        write_state(directory, StackState(supervisor=Process(name="s", pid=1, started=1)))
    finally:
        os.umask(old)

    assert (directory / STATE_FILE).stat().st_mode & 0o777 == 0o600
    assert distrusted(directory) == ""
