"""`muster up` → the README's "Talk to it" commands, verbatim → `muster down`; a crash; a
service that exits and is started again.

The commands are read from the README itself, so the section cannot drift from what works.
The stack runs on free ports in a state directory of the test's (MUSTER_UP_*_PORT=0,
MUSTER_STATE_DIR), the overrides the README documents, and every client command finds the
gateway through MUSTER_GATEWAY, as the README says.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from urllib.request import urlopen

import pytest
from up_stack import MUSTER, ROOT, child_running, muster, start, up_env, wait_for_event

from muster.launcher.upstate import Process, StackState, alive, read_state, start_time

pytestmark = pytest.mark.timeout(240)


def readme_commands() -> list[list[str]]:
    """The commands of the README's "Talk to it" block, comments dropped."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Talk to it", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line.split("  #", 1)[0]) for line in block.splitlines()]
    return [c for c in commands if c]


def test_the_readme_commands_work_verbatim_after_muster_up(tmp_path: Path) -> None:
    commands = readme_commands()
    assert commands[0] == ["muster", "up"]
    assert commands[-1] == ["muster", "down"]
    env = up_env(tmp_path)
    try:
        outputs, processes = run_all(commands, env, tmp_path)
    finally:  # whatever failed, nothing stays up
        subprocess.run([*MUSTER, "down"], env=env, capture_output=True, timeout=120, check=False)

    assert "gateway    127.0.0.1:" in outputs["up"]
    assert "Stop it with: muster down" in outputs["up"]
    assert re.search(r"^cluster-queue +- +yes", outputs["queues"], re.M)
    workloads = outputs["workloads"]
    assert re.search(r"^team-a +job-sample-job-team-a-\w+ +job/sample-job-team-a", workloads, re.M)
    describe = outputs["describe workload"]
    assert re.search(r"^Owner: +Job/sample-job-team-a$", describe, re.M)
    assert re.search(r"^  job-sample-job-team-a-\w+-main-0 +main +node-\d$", describe, re.M)
    assert "workload.admitted" in outputs["events --workload"]
    assert outputs["stop clusterqueue"].strip() == (
        "clusterqueue.kueue.x-k8s.io/cluster-queue stopped (HoldAndDrain)"
    )
    status = outputs["status"]
    # A newcomer read the gateway row's health port as the gateway's address.
    assert re.match(r"COMPONENT +PID +HEALTH CHECK +STATE ", status)
    assert re.search(r"^gateway 127\.0\.0\.1:\d+, dashboard http://", status, re.M)
    assert re.search(
        r"^gateway +\d+ +127\.0\.0\.1:\d+ +running +0 +- +127\.0\.0\.1:\d+$", status, re.M
    )
    # Every gateway of this NATS server is muster up's own: Submit's one-write claim; every
    # binder, gang-permit and gateway too: no `bound` for pods made on their nodes.
    assert "--name-claims submitted" in outputs["gateway argv"]
    assert "--bound-events binds" in outputs["binder argv"]
    assert outputs["down"].strip() == "muster is down."
    assert [p.name for p in processes if alive(p)] == []
    assert read_state(tmp_path) is None


def run_all(
    commands: list[list[str]], env: dict[str, str], directory: Path
) -> tuple[dict[str, str], list[Process]]:
    """Run each command as the README shows it; (outputs by its first two words, every
    process `muster up` started)."""
    outputs: dict[str, str] = {}
    processes: list[Process] = []
    for argv in commands:
        done = subprocess.run(
            [*MUSTER, *argv[1:]], env=env, capture_output=True, text=True, timeout=150, cwd=ROOT
        )
        assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stdout}{done.stderr}"
        outputs[shlex.join(argv[1:3])] = done.stdout
        if argv[1] == "up":
            state = read_state(directory)
            assert state is not None
            env["MUSTER_GATEWAY"] = state.gateway  # the README's way to a gateway moved
            processes = [state.supervisor, *state.processes]
            for name in ("gateway", "binder"):
                (started,) = [p for p in state.processes if p.name == name]
                cmdline = Path(f"/proc/{started.pid}/cmdline").read_bytes().split(b"\0")
                outputs[f"{name} argv"] = shlex.join(a.decode() for a in cmdline if a)
        if argv[1:3] == ["submit", "k8s/examples/jobs.yaml"]:
            # What the next commands show is admission's answer: wait for it.
            for team in ("team-a", "team-b"):
                prefix = f"{team}/job-sample-job-{team}"
                wait_for_event(env["MUSTER_GATEWAY"], prefix, "workload.admitted")
    return outputs, processes


def test_down_after_a_crash_stops_what_is_left_and_status_says_what_died(
    tmp_path: Path,
) -> None:
    up = start(tmp_path)
    state = up.state
    os.kill(state.supervisor.pid, signal.SIGKILL)  # the supervisor dies; its children live on
    (gateway,) = [p for p in state.processes if p.name == "gateway"]
    os.kill(gateway.pid, signal.SIGKILL)
    try:
        status = muster(up, "status", ok=False)
    finally:  # whatever the status says, what is left is stopped
        done = muster(up, "down")

    assert status.returncode == 1
    assert re.search(r"^supervisor +\d+ +- +exited +- +- +-$", status.stdout, re.M)
    assert re.search(r"^gateway +\d+ .* exited +0 +- +\S+$", status.stdout, re.M)
    assert re.search(r"^admission-0 +\d+ .* running +0 +- +\S+$", status.stdout, re.M)
    assert done.stdout.startswith("muster was down already (it had crashed)")
    assert [p.name for p in state.processes if alive(p)] == []
    assert muster(up, "status", ok=False).returncode == 3


def test_up_twice_says_it_is_up_and_a_taken_port_is_named(tmp_path: Path) -> None:
    up = start(tmp_path / "a")
    try:
        (admission,) = [p for p in up.state.processes if p.name == "admission-0"]
        with urlopen(f"http://{admission.metrics}/metrics", timeout=10) as reply:
            assert "kueue_cluster_queue_status" in reply.read().decode()  # Kueue's series
        again = muster(up, "up")
        assert again.stdout.startswith("muster is already up.")
        taken = up.gateway.rsplit(":", 1)[1]
        other = subprocess.run(
            [*MUSTER, "up", "--gateway-port", taken],
            env=up_env(tmp_path / "b"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.returncode == 1
        assert other.stderr == (
            f"muster up: in use: --gateway-port {taken}; choose other ports (0: any free one)\n"
        )
    finally:
        muster(up, "down")


def test_a_stack_whose_state_directory_is_removed_stops_itself(tmp_path: Path) -> None:
    up = start(tmp_path / "gone")
    processes = [up.state.supervisor, *up.state.processes]
    shutil.rmtree(up.directory)  # nothing could find it to stop it any more

    deadline = time.monotonic() + 60
    while any(alive(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.2)  # processes exiting: nothing to wait on but /proc
    assert [p.name for p in processes if alive(p)] == []


def test_a_killed_admission_is_started_again_and_status_shows_the_restart(
    tmp_path: Path,
) -> None:
    up = start(tmp_path)
    try:
        (admission, dashboard) = [
            p for p in up.state.processes if p.name in ("admission-0", "dashboard")
        ]
        os.kill(admission.pid, signal.SIGKILL)
        os.kill(dashboard.pid, signal.SIGKILL)
        back = wait_for_state(
            tmp_path, lambda s: restarted(s, "admission-0") and restarted(s, "dashboard")
        )
        muster(up, "submit", "k8s/examples/two-teams.yaml")
        muster(up, "submit", "k8s/examples/jobs.yaml")
        wait_for_event(up.gateway, "team-a/job-sample-job-team-a", "workload.admitted")
        status = muster(up, "status")
    finally:
        muster(up, "down")

    (again,) = [p for p in back.processes if p.name == "admission-0"]
    assert again.pid != admission.pid
    assert (again.restarts, again.last_exit) == (1, -signal.SIGKILL)
    assert re.search(
        r"^admission-0 +\d+ +127\.0\.0\.1:\d+ +running +1 \(\d+s ago\) +-9 \(SIGKILL\) ",
        status.stdout,
        re.M,
    ), status.stdout
    assert re.search(r"^binder +\d+ .* running +0 +- ", status.stdout, re.M), status.stdout
    assert re.search(
        r"^dashboard +\d+ .* running +1 \(\d+s ago\) +-9 \(SIGKILL\)", status.stdout, re.M
    )
    logs = tmp_path / "logs"
    assert (logs / "admission-0.log").is_file()
    assert (logs / "admission-0.1.log").is_file()  # each start's log is kept
    assert (logs / "dashboard.1.log").is_file()
    assert read_state(tmp_path) is None


def test_a_restart_that_hangs_is_killed_at_its_deadline_and_started_again(
    tmp_path: Path,
) -> None:
    """A restarted admission replica and dashboard that hang at start (stopped before they
    serve: admission waits for the lease its killed predecessor held) are killed at the start
    deadline, and started again after their back-off; status says why they were."""
    up = start(tmp_path, "--start-deadline", "15")
    supervisor = up.state.supervisor.pid
    try:
        hung = {}
        for name, command in (("admission-0", "admission"), ("dashboard", "dashboard")):
            (old,) = [p for p in up.state.processes if p.name == name]
            os.kill(old.pid, signal.SIGKILL)
            hung[name] = child_running(supervisor, f"service\0{command}\0", other_than=old.pid)
            os.kill(hung[name], signal.SIGSTOP)  # hangs at start, never exits
        back = wait_for_state(
            tmp_path,
            lambda s: all(restarted(s, name, times=2) for name in hung),
            timeout_s=90,
        )
        status = muster(up, "status")
        muster(up, "submit", "k8s/examples/two-teams.yaml")
        muster(up, "submit", "k8s/examples/jobs.yaml")
        wait_for_event(up.gateway, "team-a/job-sample-job-team-a", "workload.admitted")
    finally:
        muster(up, "down")

    for name, pid in hung.items():
        (again,) = [p for p in back.processes if p.name == name]
        assert again.pid != pid
        assert (again.last_exit, again.last_exit_why) == (-signal.SIGKILL, "not ready in 15s")
        assert start_time(pid) is None  # killed and reaped, not left running
        assert re.search(
            rf"^{name} +\d+ .* running +2 \(\d+s ago\) +-9 \(not ready in 15s\) ",
            status.stdout,
            re.M,
        ), status.stdout


def restarted(state: StackState, name: str, *, times: int = 1) -> bool:
    (found,) = [p for p in state.processes if p.name == name]
    return found.restarts >= times and alive(found)


def wait_for_state(
    directory: Path, ready: Callable[[StackState], bool], timeout_s: float = 60.0
) -> StackState:
    """The state file once `ready` holds: the supervisor writes it; nothing to wait on but it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = read_state(directory)
        if state is not None and ready(state):
            return state
        time.sleep(0.1)
    raise AssertionError(f"{directory}/stack.json: not as expected in {timeout_s:g}s: {state}")
