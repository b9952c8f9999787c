"""Routing on Kubernetes, end to end (docs/routing.md, "On Kubernetes"): every service on a real
nats-server, watcher, gangpermit and binder with `--cluster-backend kube` against the API-server
stand-in with its Job controller, driven with kubectl-shaped objects. A light GPU Job routed to
the CPU queue runs on a CPU node asking for no GPU and gets its own requests back when evicted;
on a cluster that refuses to change a suspended Job's resources (before v1.36) it stays on its
declared queue, says why, and later runs there as written. Faults stay on meanwhile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import (
    Stack,
    condition,
    condition_when,
    eventually,
    job_when,
    object_when,
    running_stack,
    workload_of_job,
)

from muster.cluster.kube.resize import requests_of
from muster.devtools.apiserver import FeatureGates

pytestmark = pytest.mark.timeout(90)

GPU = "nvidia.com/gpu"
CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-nodes}
spec: {nodeLabels: {pool: gpu}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: cpu-nodes}
spec: {nodeLabels: {pool: cpu}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: gpu
  annotations: {muster.dev/routing-policy: fastest}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: gpu-nodes
      resources: [{name: cpu, nominalQuota: 8}, {name: nvidia.com/gpu, nominalQuota: 1}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cpu}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: cpu-nodes
      resources: [{name: cpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
---
apiVersion: v1
kind: Namespace
metadata: {name: sd}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: gpu, namespace: sd}
spec: {clusterQueue: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: cpu, namespace: sd}
spec: {clusterQueue: cpu}
---
apiVersion: v1
kind: Node
metadata: {name: gpu-node, labels: {pool: gpu}}
status:
  capacity: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "1", pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: cpu-node, labels: {pool: cpu}}
status:
  capacity: {cpu: "16", memory: 64Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"""


def job(name: str, *, queue: str, requests: str, limits: str = "{}", extra: str = "") -> str:
    return f"""
---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: sd
  labels: {{kueue.x-k8s.io/queue-name: {queue}{extra}}}
  annotations:
    muster.dev/run-seconds: "600"
spec:
  suspend: true
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
        resources: {{requests: {requests}, limits: {limits}}}
"""


BUSY = job(
    "busy", queue="gpu", requests='{cpu: "4", nvidia.com/gpu: "1"}', limits='{nvidia.com/gpu: "1"}'
)
# 26 s on a GPU, or 90 s on the CPU queue without one: behind `busy` (600 s), the CPU wins.
LIGHT = job(
    "light", queue="gpu", requests='{cpu: "1", nvidia.com/gpu: "1"}', limits='{nvidia.com/gpu: "1"}'
).replace(
    'muster.dev/run-seconds: "600"',
    'muster.dev/run-seconds: "26"\n'
    "    muster.dev/alternatives: '[{queueName: cpu, requests: {nvidia.com/gpu: 0, cpu: 4}, "
    "runSeconds: 90}]'",
)
# The same light job in a sandbox whose RuntimeClass adds half a cpu to each pod.
KATA = """
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata
overhead: {podFixed: {cpu: 500m}}
"""
LIGHT_IN_KATA = LIGHT.replace(
    "      restartPolicy: Never\n", "      restartPolicy: Never\n      runtimeClassName: kata\n"
)
URGENT = job(
    "urgent", queue="cpu", requests='{cpu: "8"}', extra=", kueue.x-k8s.io/priority-class: urgent"
)
WRITTEN = {"requests": {"cpu": "1", GPU: "1"}, "limits": {GPU: "1"}}


def resources(job: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]["resources"]
    return found


async def running_pod(stack: Stack, job: str) -> dict[str, Any]:
    """The Job controller's pod of `job`, once muster has bound it."""

    async def bound() -> dict[str, Any] | None:
        for pod in await stack.kubectl.list_pods("sd"):
            owners = pod["metadata"].get("ownerReferences") or []
            if any(o["name"] == job for o in owners) and pod["spec"].get("nodeName"):
                return pod
        return None

    return await eventually(bound)


async def routed_to(stack: Stack, key: str, count: int = 1) -> list[str]:
    """Where `key` was routed, once it was `count` times."""
    told = await stack.events.arrived(key, "workload.routed", count)
    return [e.routed.to_cluster_queue for e in told]


async def busy_gpu_then_light(stack: Stack, *, light: str = LIGHT, more: str = "") -> str:
    """The GPU taken by `busy`, then `light` submitted; the light Workload's key."""
    kubectl = stack.kubectl
    await kubectl.apply(CLUSTER + more + BUSY)
    await job_when(kubectl, "sd", "busy", suspended=False)
    await kubectl.apply(light)
    wl = (await workload_of_job(kubectl, "sd", "light"))["metadata"]["name"]
    return f"sd/{wl}"


async def test_a_light_gpu_job_routed_to_cpu_runs_there_without_a_gpu_and_gets_it_back(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        server, kubectl = stack.server, stack.kubectl
        server.faults.fail_next(2, status=500, verb="update", path="/jobs/")
        server.faults.fail_next(2, status=429, verb="create", path="/binding$")
        key = await busy_gpu_then_light(stack)
        assert await routed_to(stack, key) == ["cpu"]

        # Unsuspended with the CPU queue's requests, in the CPU flavor's pool.
        started = await job_when(kubectl, "sd", "light", suspended=False)
        assert resources(started) == {"requests": {"cpu": "4"}}
        assert started["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "cpu"}
        pod = await running_pod(stack, "light")
        assert pod["spec"]["nodeName"] == "cpu-node"
        assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "4"}}

        # Watches cut and history compacted: resumes get 410 and list again.
        assert server.drop_watches() > 0
        server.compact()

        # Preempted by an urgent CPU job: suspended, and once the Job controller has removed
        # its pod, the Job asks for what its owner wrote again.
        await kubectl.apply(URGENT)
        evicted = await condition_when(
            kubectl, "Workload", key.split("/")[1], "sd", "Evicted", "True"
        )
        assert evicted["reason"] == "Preempted"

        async def restored() -> dict[str, Any] | None:
            found = await kubectl.get("Job", "light", "sd")
            return found if found and resources(found) == WRITTEN else None

        suspended = await eventually(restored)
        assert suspended["spec"]["suspend"] is True
        assert "nodeSelector" not in suspended["spec"]["template"]["spec"]
        await job_when(kubectl, "sd", "urgent", suspended=False)


async def test_a_cluster_that_refuses_the_rewrite_keeps_the_job_on_its_queue_and_says_why(
    tmp_path: Path,
) -> None:
    older = {
        "job_controller": True,
        "gates": FeatureGates(mutable_pod_resources_for_suspended_jobs=False),
    }
    async with running_stack(tmp_path, server=older) as stack:
        kubectl = stack.kubectl
        stack.server.faults.fail_next(2, status=500, verb="update", path="/jobs/")
        key = await busy_gpu_then_light(stack)
        name = key.split("/")[1]

        # Routed to the CPU queue, refused there, back on its declared queue for good.
        evicted = await condition_when(kubectl, "Workload", name, "sd", "Evicted", "True")
        assert evicted["reason"] == "RequestsRefused"
        assert "refused to change its pod template's resources" in evicted["message"]
        assert "Job/sd/light" in evicted["message"]
        assert await routed_to(stack, key, 2) == ["cpu", "gpu"]

        # Pending on its declared queue while the GPU job holds the quota, with Kueue's reason.
        async def waiting() -> dict[str, Any] | None:
            found = condition(await kubectl.get("Workload", name, "sd"), "QuotaReserved")
            return found if found.get("reason") == "WaitingForQuota" else None

        pending = await eventually(waiting)
        assert pending["status"] == "False"
        job = await kubectl.get("Job", "light", "sd")
        assert job is not None
        assert job["spec"]["suspend"] is True
        assert resources(job) == WRITTEN  # never ran with requests its quota did not cover

        # The GPU job ends; the light one runs on the GPU queue as written.
        busy_pod = await running_pod(stack, "busy")
        await kubectl.set_pod_phase("sd", busy_pod["metadata"]["name"], "Succeeded")
        pod = await running_pod(stack, "light")
        assert pod["spec"]["nodeName"] == "gpu-node"
        assert pod["spec"]["containers"][0]["resources"] == WRITTEN
        stored = await object_when(kubectl, "Workload", name, "sd", "Admitted", "True")
        assert stored["status"]["admission"]["clusterQueue"] == "gpu"


async def test_a_routed_job_in_a_runtime_class_asks_its_containers_for_the_rest(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        kubectl = stack.kubectl
        key = await busy_gpu_then_light(stack, light=LIGHT_IN_KATA, more=KATA)
        assert await routed_to(stack, key) == ["cpu"]

        # Charged 4 cpus on the CPU queue, the RuntimeClass's overhead among them: the
        # containers ask for the rest, and the API server adds the overhead to the pod.
        started = await job_when(kubectl, "sd", "light", suspended=False)
        assert resources(started) == {"requests": {"cpu": "3500m"}}
        pod = await running_pod(stack, "light")
        assert pod["spec"]["overhead"] == {"cpu": "500m"}
        assert requests_of(pod["spec"]) == {"cpu": 4000}
        stored = await object_when(kubectl, "Workload", key.split("/")[1], "sd", "Admitted", "True")
        (assignment,) = stored["status"]["admission"]["podSetAssignments"]
        assert stored["status"]["admission"]["clusterQueue"] == "cpu"
        assert assignment["resourceUsage"] == {"cpu": "4"}
