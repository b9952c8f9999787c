"""`muster simulate` without --until ends when a pod fits no node: the gang times out, the
workload is requeued and admitted again, and nothing ahead could change that. Before, the
virtual clock ran on in 300 s cycles for ever (a hung command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOO_BIG = """\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {capacity: {cpu: "4"}}
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
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: "16"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team, name: main}
spec: {clusterQueue: cq}
---
apiVersion: batch/v1
kind: Job
metadata:
  namespace: team
  name: fits
  labels: {kueue.x-k8s.io/queue-name: main}
  annotations: {muster.dev/run-seconds: "100"}
spec:
  template:
    spec:
      containers: [{name: a, resources: {requests: {cpu: "2"}}}]
---
apiVersion: batch/v1
kind: Job
metadata:
  namespace: team
  name: big
  labels: {kueue.x-k8s.io/queue-name: main}
spec:
  template:
    spec:
      containers: [{name: a, resources: {requests: {cpu: "8"}}}]
"""


def test_a_pod_that_fits_no_node_ends_the_run_with_it_pending(tmp_path: Path) -> None:
    scenario = tmp_path / "too-big.yaml"
    scenario.write_text(TOO_BIG)

    done = subprocess.run(
        [sys.executable, "-m", "muster.cli.main", "simulate", str(scenario), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # Pod names are job-NAME-HASH-main-0, as Kueue names a Job's workload.
    pods = {p["metadata"]["name"].split("-")[1]: p for p in report["pods"]}
    assert {job: p["status"]["phase"] for job, p in pods.items()} == {
        "fits": "Succeeded",
        "big": "Pending",
    }
    (scheduled,) = [c for c in pods["big"]["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled["reason"] == "Unschedulable"
    assert scheduled["message"] == "0/1 nodes are available: 1 Insufficient cpu"
    # The run ends once the cycle repeats, after the other job finished, and says so.
    assert "from t=300 for ever" in done.stderr
