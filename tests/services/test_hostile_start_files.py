"""A file flag naming a pipe at start: every service and command that reads a file when it
starts refuses a FIFO (or a directory) with an error naming the flag and the file, and exits
non-zero instead of waiting for ever on the open.

Each case is the real command line in its own process, all started at once so the module takes
one process start, not a dozen.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
DEADLINE_S = 60.0  # for all: far beyond a refused start; one that hangs on the pipe never ends

# (command, flag): every FILE flag a service reads at start, and the commands reading scenarios
CASES = [
    ("service admission", "--kueue-config"),
    ("service watcher", "--kueue-config"),
    ("service watcher", "--kubeconfig"),
    ("service gangpermit", "--nats-creds"),
    ("service binder", "--nats-tls-ca"),
    ("service preemption", "--nats-tls-cert"),
    ("service preemption", "--nats-tls-key"),
    ("service gateway", "--tokens-file"),
    ("service gateway", "--policy-file"),
    ("service gateway", "--tls-cert"),
    ("service gateway", "--client-ca"),
    ("service gateway", "--visibility-client-ca"),
    ("service dashboard", "--tls-ca"),
    ("run", "--scenario"),
    ("simulate --config", "FILE"),
]


def _argv(command: str, flag: str, path: Path, scenario: Path) -> list[str]:
    head = [str(Path(sys.executable).with_name("muster")), *command.split()]
    if flag == "FILE":  # `simulate --config PIPE SCENARIO`
        return [*head, str(path), str(scenario)]
    unreachable = ["--nats", "nats://127.0.0.1:1", "--nats-connect-timeout", "1"]
    return [*head, flag, str(path), *(unreachable if command.startswith("service") else [])]


def test_a_pipe_named_by_a_file_flag_is_refused_at_start(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)  # nothing ever writes to it: opening it to read waits for ever
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n")
    env = {**os.environ, "MUSTER_CLUSTER": "c1"}
    started = [
        (case, subprocess.Popen(_argv(*case, pipe, scenario), env=env, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        for case in CASES
    ]  # fmt: skip
    try:
        wrong = _problems(started, str(pipe), time.monotonic() + DEADLINE_S)
    finally:
        for _, process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert not wrong, "\n".join(wrong)


def _problems(
    started: list[tuple[tuple[str, str], subprocess.Popen[str]]], pipe: str, deadline: float
) -> list[str]:
    wrong: list[str] = []
    for (command, flag), process in started:
        try:
            _, err = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            wrong.append(f"{command} {flag}: still starting after {DEADLINE_S:.0f} s")
            continue
        named = flag == "FILE" or flag in err
        if process.returncode == 0 or not named or pipe not in err:
            wrong.append(f"{command} {flag}: exit {process.returncode}, {err[-300:]!r}")
        elif "not a regular file" not in err:
            wrong.append(f"{command} {flag}: does not say why: {err[-300:]!r}")
    return wrong
