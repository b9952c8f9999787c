"""`muster simulate` without --until ends when a pod fits no node: the gang times out, the
workload is requeued and admitted again, and nothing ahead could change that. Before, the
virtual clock ran on in 300 s cycles for ever (a hung command). The same with a check
controller answering each reservation, or MultiKueue workers beside the manager's nodes (until
task simfix those ran for ever), and under `muster run --virtual`, which says so as `simulate`
does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from muster.cli.main import main

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


# ClusterQueue cq's reservations wait for a ProvisioningRequest, run by muster's own controller
# and provisioned by the scripted autoscaler 30 s after each is made.
PROVISIONED = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ProvisioningRequestConfig
metadata: {name: capacity, annotations: {muster.dev/provisioning: "Provisioned@30"}}
spec:
  provisioningClassName: check-capacity.autoscaling.x-k8s.io
  managedResources: [cpu]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: prov}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: capacity}
---
""" + TOO_BIG.replace(
    "  namespaceSelector: {}\n", "  namespaceSelector: {}\n  admissionChecks: [prov]\n"
)

# A MultiKueue worker beside the manager's node n1: cq has no MultiKueue check, so its
# workloads run on n1, in a simulation of two clusters.
WITH_A_WORKER = (
    """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: dispatch}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: workers}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {name: workers}
spec: {clusters: [east]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: east}
spec:
  kubeConfig: {locationType: Secret, location: east-kubeconfig}
---
apiVersion: v1
kind: Node
metadata:
  name: east-1
  annotations: {muster.dev/cluster: east}
status: {capacity: {cpu: "2"}}
---
"""
    + TOO_BIG
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("scenario", "note"),
    [
        # Reserved at 0 and again at each requeue; provisioned 30 s later, admitted, the gang
        # timed out 300 s after: the cycle from the second admission (t=360) repeats.
        (PROVISIONED, "the simulation ends at t=690: from there it would repeat what it did "
         "from t=360 for ever"),
        (WITH_A_WORKER, "the simulation ends at t=600: from there it would repeat what it did "
         "from t=300 for ever"),
    ],
    ids=["check-controller", "multikueue"],
)  # fmt: skip
def test_a_run_with_a_check_controller_or_workers_ends_on_its_repeat_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: str, note: str
) -> None:
    path = tmp_path / "too-big.yaml"
    path.write_text(scenario)

    assert main(["simulate", str(path), "-o", "json"]) == 0

    out, err = capsys.readouterr()
    assert note in err
    phases = {
        p["metadata"]["name"].split("-")[1]: p["status"]["phase"] for p in json.loads(out)["pods"]
    }
    assert phases == {"fits": "Succeeded", "big": "Pending"}


@pytest.mark.timeout(60)
def test_run_virtual_says_why_its_run_ended_as_simulate_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "too-big.yaml"
    path.write_text(TOO_BIG)

    assert main(["run", "--virtual", "--scenario", str(path)]) == 0

    out, err = capsys.readouterr()
    assert "the simulation ends at t=600: from there it would repeat what it did from t=300" in err
    assert "Simulating" in out
