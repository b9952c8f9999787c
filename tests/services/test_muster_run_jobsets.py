"""JobSets on the simulated cluster as a user runs them (`muster run --scenario`, every service
a process): admitted within quota onto the flavor's nodes, preempted by a higher priority, and
finished, giving the quota back to the one waiting for it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from jobset_queues import preempting_queue

RUN = [sys.executable, "-m", "muster.cli.main", "run", "--speed", "40"]

# Flavor pool-a holds 4 cpu on node-2 (node-1, first in name order, is another pool). `batch`
# (low: 2 child Jobs x 2 pods) takes all of it; `urgent` (high: a leader and 2 workers) arrives
# at 4 s, preempts it, runs 10 s and finishes; `batch` is admitted again with the quota given
# back.
SCENARIO = (
    """\
apiVersion: v1
kind: Node
metadata: {name: node-2, labels: {pool: a}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}
---
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {pool: b}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}
---
"""
    + preempting_queue("ns")
    + """---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  namespace: ns
  name: batch
  labels: {kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: low}
  annotations: {muster.dev/run-seconds: "400"}
spec:
  suspend: true
  replicatedJobs:
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 2
        template:
          spec:
            containers: [{name: c, resources: {requests: {cpu: "1"}}}]
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  namespace: ns
  name: urgent
  labels: {kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: high}
  annotations: {muster.dev/run-seconds: "10", muster.dev/submit-after: "4"}
spec:
  suspend: true
  replicatedJobs:
  - name: leader
    template:
      spec:
        template:
          spec:
            containers: [{name: c, resources: {requests: {cpu: "1"}}}]
  - name: workers
    replicas: 2
    template:
      spec:
        template:
          spec:
            containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""
)


@pytest.mark.timeout(120)
def test_jobsets_are_admitted_preempted_and_finished_on_the_flavors_nodes(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)

    done = subprocess.run(
        [*RUN, "--scenario", str(path), "--until", "40"],
        capture_output=True,
        text=True,
        timeout=110,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"jobset-batch-\S+\s+admitted\s+cq on pool-a", out), out
    assert re.search(r"jobset-batch-\S+\s+evicted\s+Preempted by ns/jobset-urgent-", out), out
    # It ran its whole 10 s; more on a loaded machine (the report times the events it saw).
    ran = re.search(r"jobset-urgent-\S+\s+finished\s+ran (\d+)s", out)
    assert ran, out
    assert int(ran[1]) >= 10, out
    table = out.split("\nWORKLOAD ", 1)[1].split("\n\n", 1)[0]
    (batch,) = [row for row in table.splitlines() if "jobset-batch-" in row]
    (urgent,) = [row for row in table.splitlines() if "jobset-urgent-" in row]
    assert re.search(r"\bnode-2\s+Running \(evicted 1x\)$", batch), table
    assert re.search(r"\bnode-2\s+Finished$", urgent), table  # the flavor's node selector
