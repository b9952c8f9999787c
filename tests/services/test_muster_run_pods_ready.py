"""waitForPodsReady through every service on the simulated cluster, as a user runs it
(`muster run --scenario`): the sim kubelet turns a pod Ready after its
`muster.dev/pods-ready-after`, the watcher reads readiness from that condition, and admission
evicts at the timeout the workload whose pods never become Ready, as `muster simulate` does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

RUN = [sys.executable, "-m", "muster.cli.main", "run", "--speed", "40"]

SCENARIO = """\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady:
  enable: true
  timeout: 2s
  requeuingStrategy: {backoffLimitCount: 0}
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
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
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
  annotations: {{muster.dev/run-seconds: "{run}", muster.dev/pods-ready-after: "{ready}"}}
spec:
  template:
    spec:
      containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]
"""


@pytest.mark.timeout(120)
def test_pods_never_ready_are_evicted_and_pods_ready_late_run_to_the_end(tmp_path: Path) -> None:
    # 2 s of timeout (admission's clock is real time) are 80 scenario seconds at 40x: the
    # pods that never turn Ready would still run then. A deactivated workload never ends the
    # run: --until does.
    path = tmp_path / "scenario.yaml"
    path.write_text(
        SCENARIO
        + JOB.format(name="stuck", run=400, ready="never")
        + JOB.format(name="slow", run=40, ready="1")
    )

    done = subprocess.run(
        [*RUN, "--until", "600", "--scenario", str(path)],
        capture_output=True,
        text=True,
        timeout=110,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    stuck = [line for line in lines if "job-stuck" in line]
    slow = [line for line in lines if "job-slow" in line]
    assert any(re.search(r"evicted\s+PodsReadyTimeout", line) for line in stuck), stuck
    assert not any("evicted" in line for line in slow), slow
    assert any(re.search(r"finished\s+ran", line) for line in slow), slow
