"""A JobSet routed to an alternative on Kubernetes (docs/routing.md, "On Kubernetes"): every
service with `--cluster-backend kube` against the API-server stand-in with its Job and JobSet
controllers. A JobSet behind a busy queue is routed, as a whole, to its alternative's queue:
every replicatedJob's pod template gets that queue's flavor's node selector and its child Jobs'
pods run on its nodes; preempted there, the JobSet is suspended with its templates as its owner
wrote them. (A JobSet's alternative cannot change requests: refused at submission, see
tests/scenarios/invalid/jobset-alternative-requests.yaml.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import condition_when, eventually, job_when, running_stack
from test_kube_jobsets_e2e import create, get_jobset, workload_of
from test_kube_routing_e2e import job, routed_to

pytestmark = pytest.mark.timeout(120)

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a-nodes}
spec: {nodeLabels: {pool: a}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: b-nodes}
spec: {nodeLabels: {pool: b}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: a
  annotations: {muster.dev/routing-policy: fastest}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: a-nodes, resources: [{name: cpu, nominalQuota: 4}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: b}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: b-nodes, resources: [{name: cpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
---
apiVersion: v1
kind: Namespace
metadata: {name: sd}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: a, namespace: sd}
spec: {clusterQueue: a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: b, namespace: sd}
spec: {clusterQueue: b}
---
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {pool: a}}
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: node-b, labels: {pool: b}}
status:
  capacity: {cpu: "16", memory: 64Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"""
BUSY = job("busy", queue="a", requests='{cpu: "4"}')
URGENT = job(
    "urgent", queue="b", requests='{cpu: "8"}', extra=", kueue.x-k8s.io/priority-class: urgent"
)


def light_jobset() -> dict[str, Any]:
    """JobSet `light` on queue a: a driver and a worker, one pod of 1 cpu each; 26 s there
    (behind `busy`'s 600 s) or 60 s on queue b."""
    template = {
        "spec": {
            "schedulerName": "muster",
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ],
        }
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "light",
            "namespace": "sd",
            "labels": {"kueue.x-k8s.io/queue-name": "a"},
            "annotations": {
                "muster.dev/run-seconds": "26",
                "muster.dev/alternatives": "[{queueName: b, runSeconds: 60}]",
            },
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {"name": rj, "replicas": 1, "template": {"spec": {"template": template}}}
                for rj in ("driver", "worker")
            ],
        },
    }


def pod_specs(js: dict[str, Any]) -> list[dict[str, Any]]:
    return [rj["template"]["spec"]["template"]["spec"] for rj in js["spec"]["replicatedJobs"]]


async def jobset_when(stack: Any, *, suspended: bool) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        js = await get_jobset(stack.kubectl, "light", namespace="sd")
        return js if js is not None and js["spec"]["suspend"] is suspended else None

    return await eventually(check, timeout_s=30)


async def test_a_jobset_routed_to_its_alternative_runs_on_that_queues_nodes(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        kubectl = stack.kubectl
        stack.server.faults.fail_next(2, status=500, verb="update", path="/jobsets/")
        await kubectl.apply(CLUSTER + BUSY)
        await job_when(kubectl, "sd", "busy", suspended=False)
        await create(kubectl, light_jobset(), namespace="sd")
        name = await workload_of(kubectl, "light", namespace="sd")
        assert await routed_to(stack, f"sd/{name}") == ["b"]
        admitted = await condition_when(kubectl, "Workload", name, "sd", "Admitted", "True")
        assert admitted["status"] == "True"
        stored = await kubectl.get("Workload", name, "sd")
        assert stored is not None
        assert stored["status"]["admission"]["clusterQueue"] == "b"

        running = await jobset_when(stack, suspended=False)
        assert [s.get("nodeSelector") for s in pod_specs(running)] == [{"pool": "b"}] * 2

        async def bound() -> list[dict[str, Any]] | None:
            pods = [
                p
                for p in await kubectl.list_pods("sd")
                if p["metadata"]["name"].startswith("light-") and p["spec"].get("nodeName")
            ]
            return pods if len(pods) == 2 else None

        pods = await eventually(bound, timeout_s=30)
        assert {p["spec"]["nodeName"] for p in pods} == {"node-b"}

        # Preempted on queue b by an urgent Job: suspended, its templates as written again.
        await kubectl.apply(URGENT)
        evicted = await condition_when(kubectl, "Workload", name, "sd", "Evicted", "True")
        assert evicted["reason"] == "Preempted"
        stopped = await jobset_when(stack, suspended=True)
        assert [s.get("nodeSelector") for s in pod_specs(stopped)] == [None, None]
        await job_when(kubectl, "sd", "urgent", suspended=False)
