"""`muster run` as a user runs it: NATS, every service as a process, the demo, a clean stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from nats_process import NatsServer
from up_stack import IN_THE_FOREGROUND

RUN = [sys.executable, "-m", "muster.cli.main", "run", "--speed", "40"]


def _services_left(pattern: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if pattern in line]


@pytest.mark.timeout(180)
def test_demo_ends_with_every_workload_finished_and_stops_everything() -> None:
    done = subprocess.run(RUN, capture_output=True, text=True, timeout=170)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout.split("\nWORKLOAD ", 1)[1].split("\n\n", 1)[0]
    rows = table.splitlines()[1:]
    assert len(rows) == 11  # 10 Jobs and the v1beta1 PodGroup gang
    assert all(re.search(r"\bFinished\b", row) for row in rows), table
    (gang,) = [row for row in rows if row.startswith("team-a/dist-train-workers ")]
    assert "(gang)" in gang
    assert re.search(r"\bpermitted +4 pods at once", done.stdout)
    assert any("evicted 1x" in row for row in rows)  # urgent-train preempts one job
    assert all(re.search(r"\bnode-", row) for row in rows)  # every pod was bound to a node
    log_dir = re.search(r"logs in (\S+)", done.stdout)
    assert log_dir is not None
    assert _services_left(log_dir.group(1)) == []  # its nats-server is gone too
    # Each service ran as its own NATS user (muster.bus.permissions) and stayed within it.
    assert permission_violations(Path(log_dir.group(1))) == []
    assert not (Path(log_dir.group(1)) / "jetstream").exists()  # nor are its passwords kept


def permission_violations(log_dir: Path) -> list[str]:
    """The nats-server's log lines about a user refused a subject, in a `muster run` log dir."""
    text = (log_dir / "nats-server.log").read_text()
    return [line for line in text.splitlines() if "Violation" in line]


# A progress line of the run ("   3.1s  team-b/job-eval-4f85f   admitted   ...").
PROGRESS = re.compile(r" *\d+\.\ds  \S+ +\w+")


@pytest.mark.timeout(180)
def test_ctrl_c_stops_every_process_it_started_and_says_so_in_one_line() -> None:
    # In a session of its own, so that the SIGINT goes to its whole process group, as a
    # terminal's Ctrl-C does: the nats-server and the services got it too, and their deaths
    # under the launcher printed "disconnected from NATS", "NATS drain failed" and "Unknown
    # child process pid N" before the one line that says what happened.
    proc = subprocess.Popen(
        [*IN_THE_FOREGROUND, *RUN[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    header = ""
    # As long as the start progresses (a stalled one ends the run: `muster.launcher.progress`).
    while "all services healthy" not in header:
        line = proc.stdout.readline()
        assert line, header  # it ended before every service served
        header += line
    log_dir = re.search(r"logs in (\S+)", header)
    assert log_dir is not None

    os.killpg(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    said = [line for line in rest.splitlines() if line and not PROGRESS.match(line)]
    assert said == ["muster run: interrupted; everything it started is stopped"], rest
    assert _services_left(log_dir.group(1)) == []
    assert _services_left(f"--nats nats://127.0.0.1:{_port(header)}") == []


def _port(header: str) -> str:
    match = re.search(r"NATS nats://127\.0\.0\.1:(\d+)", header)
    assert match is not None
    return match.group(1)


def test_compose_runs_every_service_against_one_nats() -> None:
    import yaml

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "compose.yaml")) as f:
        compose = yaml.safe_load(f)
    services = compose["services"]
    assert services["nats"]["image"].startswith("nats:")
    assert "-js" in services["nats"]["command"]
    muster = {name: svc for name, svc in services.items() if name != "nats"}
    commands = {svc["command"][1] for svc in muster.values()}
    assert commands == {
        "sim-cluster",
        "watcher",
        "admission",
        "preemption",
        "gangpermit",
        "binder",
        "gateway",
    }
    for name, svc in muster.items():
        assert svc["command"][0] == "service", name
        assert svc["environment"]["MUSTER_NATS_URL"] == "nats://nats:4222", name
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile", name
        assert "nats" in svc["depends_on"], name
    shards = sorted(s["command"] for s in muster.values() if s["command"][1] == "admission")
    assert [c[c.index("--shard") + 1] for c in shards] == ["0", "1"]
    assert os.path.exists(os.path.join(root, "deploy", "Dockerfile"))
    # every service name in compose is one `muster service` knows
    from muster.cli.service import SERVICES

    assert commands <= set(SERVICES)


SCENARIO_WITH_KUEUE_CONFIG = """\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
featureGates: {UnadmittedWorkloadsObservability: false}
---
apiVersion: v1
kind: Node
metadata: {name: node-1}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 1}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: ns, name: lq}
spec: {clusterQueue: cq}
"""

JOB = """\
---
apiVersion: batch/v1
kind: Job
metadata:
  namespace: ns
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: lq}}
  annotations: {{muster.dev/run-seconds: "10"}}
spec:
  template:
    spec:
      containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]
"""


PREEMPTING = """\
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: batch/v1
kind: Job
metadata:
  namespace: ns
  name: urgent
  labels: {kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: high}
  annotations: {muster.dev/run-seconds: "400", muster.dev/submit-after: "4"}
spec:
  template:
    spec:
      containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""


@pytest.mark.timeout(120)
def test_a_preempted_workload_pending_again_reads_pending_and_requeued(tmp_path: Path) -> None:
    """A workload preempted and queued again ends the run as Kueue's conditions name it:
    Pending, requeued (Evicted only while its pods stop)."""
    queues = SCENARIO_WITH_KUEUE_CONFIG.replace(
        "  namespaceSelector: {}\n",
        "  namespaceSelector: {}\n  preemption: {withinClusterQueue: LowerPriority}\n",
    )
    victim = JOB.format(name="victim").replace('"10"', '"400"')
    path = tmp_path / "scenario.yaml"
    path.write_text(queues + victim + PREEMPTING)

    done = subprocess.run(
        [*RUN, "--scenario", str(path), "--until", "40"],
        capture_output=True,
        text=True,
        timeout=110,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"job-victim\S*\s+evicted\s+Preempted by", done.stdout), done.stdout
    table = done.stdout.split("\nWORKLOAD ", 1)[1].split("\n\n", 1)[0]
    (victim_row,) = [row for row in table.splitlines() if "job-victim" in row]
    assert victim_row.endswith("Pending (requeued, evicted 1x)"), table
    (urgent_row,) = [row for row in table.splitlines() if "job-urgent" in row]
    assert re.search(r"\bRunning$", urgent_row), table


@pytest.mark.timeout(120)
def test_a_scenarios_kueue_configuration_reaches_admission(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        SCENARIO_WITH_KUEUE_CONFIG + JOB.format(name="first") + JOB.format(name="second")
    )

    done = subprocess.run(
        [*RUN, "--scenario", str(path)], capture_output=True, text=True, timeout=110
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pending = [line for line in done.stdout.splitlines() if " pending " in line]
    # With the gate off, Kueue's classic reason instead of muster's default WaitingForQuota.
    assert pending
    assert all("Pending: couldn't assign flavors" in line for line in pending), pending


# waitForPodsReady, with no second try: 2 s of timeout (admission's clock is real time) are 80
# scenario seconds at 40x.
WAIT_FOR_PODS_READY = """\
waitForPodsReady:
  enable: true
  timeout: 2s
  recoveryTimeout: 2s
  requeuingStrategy: {backoffLimitCount: 0}"""


def job_ready_after(name: str, *, run_s: int, ready_after: str, more: str = "") -> str:
    """JOB, running `run_s` scenario seconds, its pods Ready `ready_after` seconds after start;
    `more`: other annotations, `key: "value"` separated by commas."""
    run = 'muster.dev/run-seconds: "10"'
    ready = f'muster.dev/run-seconds: "{run_s}", muster.dev/pods-ready-after: "{ready_after}"'
    return JOB.format(name=name).replace(run, ready + (f", {more}" if more else ""))


LOST = 'muster.dev/pods-unready-after: "8", muster.dev/pods-unready-for: "'


@pytest.mark.timeout(120)
def test_pods_never_ready_are_evicted_and_pods_ready_late_run_to_the_end(tmp_path: Path) -> None:
    """The sim kubelet turns a pod Ready after its pods-ready-after, the watcher reads readiness
    from that condition, and admission evicts at the timeout the workload whose pods never turn
    Ready (here deactivated: no requeue allowed), as `muster simulate` does; likewise at the
    recovery timeout one whose pod loses readiness for good, not one whose pod regains it in
    time."""
    config = SCENARIO_WITH_KUEUE_CONFIG.replace(
        "featureGates: {UnadmittedWorkloadsObservability: false}", WAIT_FOR_PODS_READY
    )
    jobs = [
        job_ready_after("stuck", run_s=400, ready_after="never"),  # would still run at 80 s
        job_ready_after("slow", run_s=40, ready_after="1"),
        # Ready at once, not Ready 8 s later: for good, or for 8 s (the recovery timeout: 80).
        job_ready_after("lost", run_s=400, ready_after="0", more=LOST + 'never"'),
        job_ready_after("blip", run_s=40, ready_after="0", more=LOST + '8"'),
    ]
    path = tmp_path / "scenario.yaml"
    path.write_text(config + "".join(jobs))

    # The run ends on its own once the deactivated workload can do nothing more (no --until).
    done = subprocess.run(
        [*RUN, "--scenario", str(path)], capture_output=True, text=True, timeout=110
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    stuck = [line for line in lines if "job-stuck" in line]
    slow = [line for line in lines if "job-slow" in line]
    # backoffLimitCount 0: the timeout deactivates at once, as Kueue's reconciler does.
    limit = r"evicted\s+DeactivatedDueToRequeuingLimitExceeded"
    assert any(re.search(limit, line) for line in stuck), stuck
    assert not any("evicted" in line for line in slow), slow
    assert any(re.search(r"finished\s+ran", line) for line in slow), slow
    lost = [line for line in lines if "job-lost" in line]
    blip = [line for line in lines if "job-blip" in line]
    assert any(re.search(limit, line) for line in lost), lost
    assert not any("evicted" in line for line in blip), blip
    assert any(re.search(r"finished\s+ran", line) for line in blip), blip
    table = done.stdout.split("\nWORKLOAD ", 1)[1].split("\n\n", 1)[0]
    (stuck_row,) = [row for row in table.splitlines() if "job-stuck" in row]
    assert re.search(r"\bInactive\b", stuck_row), table


def late_job(name: str, *, after_s: int) -> str:
    """JOB, submitted `after_s` scenario seconds into the run."""
    run = 'muster.dev/run-seconds: "10"'
    return JOB.format(name=name).replace(run, f'{run}, muster.dev/submit-after: "{after_s}"')


@pytest.mark.timeout(150)
def test_a_run_outlives_a_nats_server_restart(tmp_path: Path, nats_process: NatsServer) -> None:
    path = tmp_path / "scenario.yaml"
    jobs = [JOB.format(name="first"), JOB.format(name="second")]
    jobs += [late_job(f"late-{i}", after_s=40 + 10 * i) for i in range(2)]
    path.write_text(SCENARIO_WITH_KUEUE_CONFIG + "".join(jobs))
    argv = [*RUN[:-1], "10", "--nats", nats_process.url, "--scenario", str(path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = ""
    while " admitted " not in seen:
        line = proc.stdout.readline()
        assert line, seen  # it ended before admitting anything
        seen += line

    nats_process.restart()  # same port and store: the services and the run carry on
    rest, _ = proc.communicate(timeout=120)

    output = seen + rest
    assert proc.returncode == 0, output[-4000:]
    table = output.split("\nWORKLOAD ", 1)[1].split("\n\n", 1)[0]
    assert len(table.splitlines()[1:]) == 4
    assert all(re.search(r"\bFinished\b", row) for row in table.splitlines()[1:]), table
    assert "Traceback" not in output
