"""waitForPodsReady on Kubernetes, end to end: readiness is the pods' Ready condition (what
their readiness probes say), not their phase. A Job whose pods run but are not Ready is not
PodsReady and is evicted at the timeout, as Kueue evicts it; once they are Ready, its Workload
shows PodsReady=True. Every service on a real nats-server against the API-server stand-in,
the test as the Job controller and the kubelet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import (
    Stack,
    condition,
    condition_when,
    job_when,
    pods_bound,
    running_stack,
    workload_of_job,
)

pytestmark = pytest.mark.timeout(60)

QUEUES = """
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {kubernetes.io/hostname: node-1}}
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 8}]}]
---
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: ml}
spec: {clusterQueue: cq}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: lq}
spec:
  suspend: true
  parallelism: 2
  completions: 2
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers: [{name: main, image: busybox:1.36, resources: {requests: {cpu: "1"}}}]
"""


def kueue_config(timeout: str) -> str:
    return f"""
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady: {{enable: true, timeout: {timeout}}}
"""


async def running_unready(stack: Stack) -> tuple[str, list[str]]:
    """Job `train` admitted, its pods bound and Running with their Ready condition False; its
    Workload's name and its pods."""
    kubectl = stack.kubectl
    await kubectl.apply(QUEUES)
    job = await job_when(kubectl, "ml", "train", suspended=False)
    name = (await workload_of_job(kubectl, "ml", "train"))["metadata"]["name"]
    pods = await kubectl.run_job_pods(job)
    await pods_bound(kubectl, "ml", pods)
    for pod in pods:
        await kubectl.set_pod_phase("ml", pod, "Running", ready=False)
    await stack.events.wait_for(f"ml/{name}", "workload.running")
    return name, pods


def reason_and_message(found: dict[str, Any]) -> tuple[str, str]:
    return found["reason"], found["message"]


async def test_pods_running_but_not_ready_are_evicted_at_the_timeout(tmp_path: Path) -> None:
    async with running_stack(tmp_path, kueue_config=kueue_config("1s")) as stack:
        name, _ = await running_unready(stack)
        (running,) = stack.events.of(f"ml/{name}", "workload.running")
        assert not running.running.pods_ready  # Running is not Ready
        evicted = await condition_when(stack.kubectl, "Workload", name, "ml", "Evicted", "True")
        assert evicted["reason"] == "PodsReadyTimeout"
        await job_when(stack.kubectl, "ml", "train", suspended=True)
        workload = await stack.kubectl.get("Workload", name, "ml")
        assert reason_and_message(condition(workload, "PodsReady")) == (
            "WaitForStart",
            "Not all pods are ready or succeeded",
        )
        assert condition(workload, "PodsReady")["status"] == "False"
        assert not stack.events.of(f"ml/{name}", "workload.pods_ready")


async def test_pods_that_become_ready_make_the_workload_pods_ready(tmp_path: Path) -> None:
    async with running_stack(tmp_path, kueue_config=kueue_config("10m")) as stack:
        kubectl = stack.kubectl
        name, pods = await running_unready(stack)
        waiting = await condition_when(kubectl, "Workload", name, "ml", "PodsReady", "False")
        assert reason_and_message(waiting) == (
            "WaitForStart",
            "Not all pods are ready or succeeded",
        )
        await kubectl.set_pod_phase("ml", pods[0], "Running")
        await kubectl.set_pod_phase("ml", pods[1], "Succeeded")  # a finished pod counts
        ready = await condition_when(kubectl, "Workload", name, "ml", "PodsReady", "True")
        assert reason_and_message(ready) == (
            "Started",
            "All pods reached readiness and the workload is running",
        )
        assert len(stack.events.of(f"ml/{name}", "workload.pods_ready")) == 1
        assert condition(await kubectl.get("Workload", name, "ml"), "Evicted") == {}
