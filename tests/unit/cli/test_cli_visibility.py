"""`muster simulate -o json` lists pending workloads with their positions, as Kueue's visibility
API does: by priority, then FIFO, counted per ClusterQueue and per LocalQueue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muster.cli.main import main

QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team-a, name: lq-a}
spec: {clusterQueue: shared}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team-b, name: lq-b}
spec: {clusterQueue: shared}
"""


def workload(namespace: str, name: str, queue: str, *, priority: int, after: int) -> str:
    return f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  namespace: {namespace}
  name: {name}
  annotations: {{muster.dev/submit-after: "{after}"}}
spec:
  queueName: {queue}
  priority: {priority}
  podSets:
  - name: main
    count: 1
    template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "2"}}}}}}]}}}}
"""


def test_pending_workloads_carry_positions_in_cluster_and_local_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [
        QUEUES,
        workload("team-a", "running", "lq-a", priority=0, after=0),
        workload("team-a", "a-low", "lq-a", priority=0, after=1),
        workload("team-b", "b-high", "lq-b", priority=10, after=2),
        workload("team-a", "a-high", "lq-a", priority=10, after=3),
    ]
    path = tmp_path / "s.yaml"
    path.write_text("---\n".join(docs))

    assert main(["simulate", str(path), "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)

    (shared,) = document["clusterQueues"]
    assert [
        (p["metadata"]["name"], p["positionInClusterQueue"], p["positionInLocalQueue"])
        for p in shared["pendingWorkloads"]
    ] == [("b-high", 0, 0), ("a-high", 1, 0), ("a-low", 2, 1)]
    assert shared["status"]["pendingWorkloads"] == 3
    by_queue = {q["name"]: q["pendingWorkloads"] for q in document["localQueues"]}
    assert [p["metadata"]["name"] for p in by_queue["lq-a"]] == ["a-high", "a-low"]
    assert [(p["localQueueName"], p["priority"]) for p in by_queue["lq-b"]] == [("lq-b", 10)]
