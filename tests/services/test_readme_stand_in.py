"""The README's local route to the Kubernetes backend ("On your machine, against the API-server
stand-in"), run as written: the stand-in in the background, `muster up` on the kube backend,
kubectl applying the examples, muster and kubectl reading what happened, then both stopped.

The block is read from the README itself, so it cannot drift from what works. Only what a user
would change on a busy machine is changed: the stand-in's port 8001 becomes a free one, and
`muster up` runs on free ports in a state directory of the test's (MUSTER_UP_*_PORT=0,
MUSTER_STATE_DIR, the overrides the README documents), its clients told MUSTER_GATEWAY.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from up_stack import MUSTER, ROOT, up_env, wait_for_event

from muster.launcher.nats_server import free_port
from muster.launcher.upstate import alive, read_state

pytestmark = pytest.mark.timeout(240)

KUBECTL = shutil.which("kubectl")
README_PORT = "8001"


def readme_block() -> list[str]:
    """The lines of the section's sh block, comments dropped."""
    section = (ROOT / "README.md").read_text().split("against the API-server stand-in\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (the README uses it)")
def test_the_readme_route_through_the_stand_in_admits_and_binds_the_example_jobs(
    tmp_path: Path,
) -> None:
    port = str(free_port())
    lines = [line.replace(README_PORT, port) for line in readme_block()]
    env = up_env(tmp_path)
    background: list[subprocess.Popen[str]] = []
    outputs: dict[str, str] = {}
    try:
        for line in lines:
            run_line(line, env, background, outputs)
    finally:  # whatever failed, nothing stays up
        subprocess.run([*MUSTER, "down"], env=env, capture_output=True, timeout=120, check=False)
        for proc in background:
            proc.kill()
            proc.wait()

    assert lines[0].endswith("&")
    assert lines[-1] == "kill %1"
    workloads = outputs["muster workloads"]
    for team in ("team-a", "team-b"):
        row = f"^{team} +job-sample-job-{team}-\\w+ +job/sample-job-{team} .* ADMITTED "
        assert re.search(row, workloads, re.M), workloads
    pods = outputs["kubectl get"]
    rows = pods.splitlines()[1:]
    assert len(rows) == 6, pods  # 3 pods per Job
    assert all(row.split()[1] in ("node-1", "node-2") for row in rows), pods
    assert "muster is down." in outputs["muster down"]
    assert read_state(tmp_path) is None


def run_line(
    line: str,
    env: dict[str, str],
    background: list[subprocess.Popen[str]],
    outputs: dict[str, str],
) -> None:
    """Run one README line as a shell would, muster and python from this checkout."""
    if line.endswith("&"):
        background.append(start_stand_in(shlex.split(line[:-1]), env))
        return
    argv = shlex.split(line)
    if argv[0] == "export":
        env.update(a.split("=", 1) for a in argv[1:])  # type: ignore[misc]
        return
    if argv == ["kill", "%1"]:
        background[0].terminate()
        assert background[0].wait(timeout=30) is not None
        return
    command = [*MUSTER, *argv[1:]] if argv[0] == "muster" else argv
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=150, cwd=ROOT)
    assert done.returncode == 0, f"{line}:\n{done.stdout}{done.stderr}"
    verb = next(a for a in argv[1:] if not a.startswith(("-", "http")))  # past `-s URL`
    outputs[f"{argv[0]} {verb}"] = done.stdout
    if argv[:2] == ["muster", "up"]:
        state = read_state(Path(env["MUSTER_STATE_DIR"]))
        assert state is not None, done.stdout
        assert state.ready, done.stdout
        assert all(alive(p) for p in state.processes)
        env["MUSTER_GATEWAY"] = state.gateway  # the README's gateway port moved
    if "k8s/examples/jobs.yaml" in argv:
        # What the next lines show is admission's and placement's answer: wait for it.
        for team in ("team-a", "team-b"):
            prefix = f"{team}/job-sample-job-{team}"
            wait_for_event(env["MUSTER_GATEWAY"], prefix, "workload.bound")


def start_stand_in(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """The stand-in, started as the README's `python -m ...` with this interpreter; returns
    once it serves (it prints its address)."""
    assert argv[0] == "python"
    proc = subprocess.Popen(
        [sys.executable, *argv[1:]], env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("serving the Kubernetes API stand-in at http://"), first
    return proc
