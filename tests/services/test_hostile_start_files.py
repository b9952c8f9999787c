"""A file flag naming a pipe at start: every service and command that reads a file when it
starts refuses a FIFO with an error naming the flag and the file, and exits 2 instead of
waiting for ever on the open (nothing ever writes to the pipe).

Every FILE flag of every service, as its `--help` lists them, on the `muster` command line
(in this process: the flags are refused before anything starts); and one service as its own
process, as a Deployment runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from muster.cli import service
from muster.cli.main import main

pytestmark = pytest.mark.timeout(120)
WHY = "not a regular file (a directory, pipe, socket or device)"


@pytest.fixture
def pipe(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)  # opening it to read waits until something opens it to write: nothing does
    return path


def file_flags(name: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The flags `muster service NAME --help` lists as taking a FILE."""
    with pytest.raises(SystemExit):
        service.main([name, "--help"])
    return sorted(set(re.findall(r"(--[a-z-]+) FILE", capsys.readouterr().out)))


@pytest.mark.parametrize("name", service.SERVICES)
def test_every_file_flag_naming_a_pipe_is_refused_at_start(
    name: str, pipe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = file_flags(name, capsys)
    refused = {}
    for flag in flags:
        with pytest.raises(SystemExit) as exited:
            service.main([name, flag, str(pipe)])
        err = capsys.readouterr().err
        refused[flag] = (exited.value.code, err.rsplit("error: ", 1)[-1])
    assert refused == {flag: (2, f"argument {flag}: {pipe}: {WHY}\n") for flag in flags}


def test_every_service_with_a_file_flag_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with_files = {name for name in service.SERVICES if file_flags(name, capsys)}
    assert {"admission", "watcher", "gateway", "dashboard", "binder"} <= with_files


def test_scenario_and_configuration_files_naming_a_pipe_are_refused(
    pipe: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--scenario", str(pipe)]) == 2
    assert capsys.readouterr().err == f"muster run: --scenario {pipe}: {WHY}\n"

    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n")
    assert main(["simulate", "--config", str(pipe), str(scenario)]) == 2
    assert f"{pipe}: (file): {WHY}" in capsys.readouterr().err


def test_a_service_process_started_with_a_pipe_exits_2_naming_it(pipe: Path) -> None:
    muster = Path(sys.executable).with_name("muster")
    argv = [str(muster), "service", "admission", "--kueue-config", str(pipe)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("admission still starting after 60 s: it waits on the pipe")
    assert done.returncode == 2
    assert done.stderr.endswith(f"error: argument --kueue-config: {pipe}: {WHY}\n")
