"""A pod whose requests, summed, pass int64 milli-units though each quantity is within it: two
containers at the largest cpu, or one plus its RuntimeClass's overhead. The node table is
numpy int64: before, placing such a pod raised OverflowError out of gang placement (a
traceback from `muster simulate`; gang-permit's loop in a deployment). Now it fits no node,
in kube-scheduler's words, even a node of the largest capacity there is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from muster.cli.main import main as muster

LARGEST = "9223372036854775807m"  # int64 milli-units: the largest quantity muster reads
HALF = "5000000000000000"  # cpu units: two of them pass int64 milli-units

QUEUES = """\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {capacity: {cpu: "LARGEST"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status: {capacity: {cpu: "4"}}
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: fat}
handler: kata
overhead: {podFixed: {cpu: "HALF"}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  cohortName: all
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: "LARGEST"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: lender}
spec:
  cohortName: all
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: "LARGEST"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team, name: main}
spec: {clusterQueue: cq}
""".replace("LARGEST", LARGEST).replace("HALF", HALF)

WORKLOAD = """\
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {namespace: team, name: big}
spec:
  queueName: main
  podSets:
  - name: main
    count: 1
    template:
      spec:
        TEMPLATE
        containers: CONTAINERS
"""


def container(name: str) -> str:
    return f'{{name: {name}, resources: {{requests: {{cpu: "{HALF}"}}}}}}'


@pytest.mark.parametrize(
    ("template", "containers"),
    [
        ("restartPolicy: Never", f"[{container('a')}, {container('b')}]"),  # each within
        ("runtimeClassName: fat", f"[{container('a')}]"),  # one, plus the overhead
    ],
    ids=["two-containers", "overhead"],
)
def test_a_pod_past_int64_fits_no_node_and_stops_nothing(
    template: str, containers: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "big.yaml"
    workload = WORKLOAD.replace("TEMPLATE", template).replace("CONTAINERS", containers)
    scenario.write_text(QUEUES + workload)

    assert muster(["simulate", str(scenario), "--until", "30", "-o", "json"]) == 0

    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    (pod,) = report["pods"]
    assert pod["status"]["phase"] == "Pending"
    (scheduled,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled["message"] == "0/2 nodes are available: 2 Insufficient cpu"
    assert "nodeName" not in pod["spec"]
