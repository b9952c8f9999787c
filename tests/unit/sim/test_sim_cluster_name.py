"""status.clusterName in `muster simulate`, as the watcher writes it on Kubernetes for the same
story (tests/kube/test_kube_status_cluster_name.py): the worker once the workload is admitted
there, not at dispatch; unset at once by any eviction (preemption, a deactivation too), though
its pods still stop; kept once it finished, at its admission too (FailedToStart). A cluster
lost: tests/scenarios/multicluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim_yaml import admission_check, cluster, run, timeline, workload

from muster.sim import SimulationResult, simulate
from muster.sim.report import to_document
from muster.sim.scenario import load_scenario

WORKERS = """\
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
spec: {clusters: [east, west]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: east}
spec: {kubeConfig: {locationType: Secret, location: east-kubeconfig}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: west}
spec: {kubeConfig: {locationType: Secret, location: west-kubeconfig}}
"""


def status_of(result: SimulationResult, name: str) -> dict[str, Any]:
    """The workload's status in `muster simulate -o json`."""
    for wl in to_document(result)["workloads"]:
        if wl["metadata"]["name"] == name:
            found: dict[str, Any] = wl.get("status", {})
            return found
    raise AssertionError(f"no workload {name}")


def test_a_workload_names_its_worker_from_its_admission_not_its_dispatch() -> None:
    # Dispatched to east at once; admitted there once check vet is Ready, at 3 s.
    docs = (
        WORKERS,
        admission_check("vet"),
        cluster(checks=("dispatch", "vet")),
        workload("train", runs=10, annotations={"muster.dev/check.vet": "Ready@3"}),
    )
    waiting = status_of(run(*docs, until_s=2), "train")
    assert waiting["admissionChecks"][0] == {
        "name": "dispatch",
        "state": "Ready",
        "message": "dispatched to cluster east: the first listed with room",
    }
    assert "clusterName" not in waiting  # the watcher sets it at the admitted event
    admitted = run(*docs, until_s=3)
    assert timeline(admitted, "Admitted") == [(3.0, "Admitted", "train")]
    assert status_of(admitted, "train")["clusterName"] == "east"
    assert status_of(run(*docs), "train")["clusterName"] == "east"  # finished: kept


def test_a_preempted_workload_names_no_worker_while_its_pods_stop() -> None:
    docs = (
        WORKERS,
        cluster(cpu="2", checks=("dispatch",), preemption="LowerPriority"),
        workload("low", cpu="2", runs=100, annotations={"muster.dev/stop-after": "4"}),
        workload("high", cpu="2", runs=10, priority=10, after=5),
    )
    assert status_of(run(*docs, until_s=4), "low")["clusterName"] == "east"
    stopping = run(*docs, until_s=7)
    assert timeline(stopping, "Evicted", "Requeued") == [(5.0, "Evicted", "low")]
    assert "clusterName" not in status_of(stopping, "low")
    assert "clusterName" not in status_of(stopping, "high")  # waits for low's quota
    later = run(*docs, until_s=9)
    assert status_of(later, "high")["clusterName"] == "east"
    assert "clusterName" not in status_of(later, "low")  # requeued, waiting for room


def test_a_deactivated_workload_names_no_worker() -> None:
    config = """\
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady:
  enable: true
  timeout: 10s
  requeuingStrategy: {backoffLimitCount: 0}
"""
    docs = (
        config,
        WORKERS,
        cluster(checks=("dispatch",)),
        workload("stuck", runs=100, annotations={"muster.dev/pods-ready-after": "never"}),
    )
    assert status_of(run(*docs, until_s=9), "stuck")["clusterName"] == "east"
    result = run(*docs, until_s=20)
    (evicted,) = [e for e in result.events if str(e.type) == "Evicted"]
    assert (evicted.time, evicted.reason) == (10.0, "DeactivatedDueToRequeuingLimitExceeded")
    stuck = status_of(result, "stuck")
    assert "clusterName" not in stuck
    assert to_document(result)["workloads"][0]["spec"]["active"] is False


def test_a_workload_that_fails_to_start_in_its_worker_names_it(tmp_path: Path) -> None:
    # Its ProvisioningRequest check's Ready gives the pods' class annotation another value than
    # the Job's template: admitted in east at 30 s, and ended there at once (FailedToStart).
    docs = (
        WORKERS,
        """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ProvisioningRequestConfig
metadata: {name: capacity, annotations: {muster.dev/provisioning: "Provisioned@30"}}
spec: {provisioningClassName: check-capacity.autoscaling.x-k8s.io, managedResources: [cpu]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: prov}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: capacity}
""",
        cluster(checks=("dispatch", "prov")),
        """\
apiVersion: batch/v1
kind: Job
metadata: {namespace: team-a, name: train, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  suspend: true
  template:
    metadata:
      annotations: {autoscaling.x-k8s.io/provisioning-class-name: best-effort-atomic-scale-up}
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox, resources: {requests: {cpu: "1"}}}]
""",
    )
    scenario = tmp_path / "s.yaml"  # through the file loader, which reads check configs
    scenario.write_text("---\n".join(docs))
    result = simulate(load_scenario([scenario]))
    assert [(e.time, str(e.type), e.reason) for e in result.events][-2:] == [
        (30.0, "Admitted", "Admitted"),
        (30.0, "Finished", "FailedToStart"),
    ]
    (train,) = to_document(result)["workloads"]
    assert train["status"]["clusterName"] == "east"
