"""`muster run --routing-policy`: the default routing policy reaches admission (live) and the
simulator (`--virtual`), and a light Job waiting behind GPU jobs runs on the CPU instead."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from muster.cli.main import main

SCENARIO = """\
apiVersion: v1
kind: Namespace
metadata: {name: sd}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
spec: {nodeLabels: {pool: gpu}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: cpu}
spec: {nodeLabels: {pool: cpu}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpu}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors: [{name: gpu, resources: [{name: cpu, nominalQuota: 8}, {name: nvidia.com/gpu, nominalQuota: 1}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cpu}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: cpu, resources: [{name: cpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: sd, name: gpu}
spec: {clusterQueue: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: sd, name: cpu}
spec: {clusterQueue: cpu}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: gpu-1, labels: {pool: gpu}}, status: {allocatable: {cpu: "8", nvidia.com/gpu: "1"}}}
- {apiVersion: v1, kind: Node, metadata: {name: cpu-1, labels: {pool: cpu}}, status: {allocatable: {cpu: "8"}}}
"""  # noqa: E501 (a scenario reads best one object a line)


def job(name: str, *, after_s: float, alternatives: str = "") -> str:
    extra = f"\n    muster.dev/alternatives: '{alternatives}'" if alternatives else ""
    return f"""\
---
apiVersion: batch/v1
kind: Job
metadata:
  namespace: sd
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: gpu}}
  annotations:
    muster.dev/submit-after: "{after_s:g}"
    muster.dev/run-seconds: "20"{extra}
spec:
  template:
    spec:
      containers:
      - name: c
        resources: {{requests: {{cpu: "2", nvidia.com/gpu: "1"}}}}
"""


LIGHT = "[{queueName: cpu, requests: {nvidia.com/gpu: 0}, runSeconds: 10}]"
# Four GPU jobs of 20 s share one GPU; the light one would finish after 100 s there, 10 s on CPU.
JOBS = "".join(job(f"gpu-{i}", after_s=0) for i in range(4)) + job(
    "light", after_s=1, alternatives=LIGHT
)


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "light.yaml"
    path.write_text(SCENARIO + JOBS)
    return path


@pytest.mark.timeout(180)
def test_live_run_routes_the_light_job_to_the_cpu_queue(scenario: Path) -> None:
    run = [sys.executable, "-m", "muster.cli.main", "run", "--scenario", str(scenario)]
    done = subprocess.run(
        [*run, "--speed", "10", "--routing-policy", "fastest"],
        capture_output=True,
        text=True,
        timeout=170,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"sd/job-light-\w+ +routed +gpu → cpu \(fastest\): routed from", out), out
    table = out.split("\nWORKLOAD ", 1)[1].split("\n\n", 1)[0]
    rows = {row.split()[0].rsplit("-", 1)[0]: row for row in table.splitlines()[1:]}
    assert re.search(r"gpu → cpu .* cpu-1 +Finished$", rows["sd/job-light"]), table
    for i in range(4):
        assert re.search(r"gpu → gpu .* gpu-1 +Finished$", rows[f"sd/job-gpu-{i}"]), table


@pytest.mark.parametrize(("policy", "routed"), [("fastest", True), ("static", False)])
def test_virtual_run_routes_with_the_policy_asked_for(
    scenario: Path, capsys: pytest.CaptureFixture[str], policy: str, routed: bool
) -> None:
    status = main(["run", "--virtual", "--scenario", str(scenario), "--routing-policy", policy])

    out = capsys.readouterr().out
    assert status == 0
    light = re.search(r"^1 +sd/job-light-\w+ +gpu +cpu +Fastest +expected to complete", out, re.M)
    assert (light is not None) is routed, out
    assert ("ROUTED" in out) is routed, out
