"""The shipped GPU example on Kubernetes, end to end: `k8s/examples/gpu-cpu-queues.yaml` applied
as an operator would, on a cluster with a tainted GPU node and a CPU node. Its GPU Job is
admitted through the GPU flavor, whose tolerations let its pods onto the tainted node, and runs
there; its CPU Job runs on the CPU node."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_services_helpers import condition_when, job_when, running_stack, workload_of_job

pytestmark = pytest.mark.timeout(90)

EXAMPLES = Path(__file__).resolve().parents[2] / "k8s" / "examples"
NODES = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1, labels: {muster.dev/pool: gpu}}
spec:
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
status:
  capacity: {cpu: "32", memory: 256Gi, nvidia.com/gpu: "8", pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: cpu-1, labels: {muster.dev/pool: cpu}}
status:
  capacity: {cpu: "64", memory: 256Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
"""


async def test_the_gpu_example_admits_its_gpu_job_and_runs_it_on_the_gpu_node(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(NODES)
        await kubectl.apply((EXAMPLES / "gpu-cpu-queues.yaml").read_text())
        for job, pool in (("finetune", "gpu"), ("preprocess", "cpu")):
            workload = (await workload_of_job(kubectl, "team-a", job))["metadata"]["name"]
            admitted = await condition_when(
                kubectl, "Workload", workload, "team-a", "Admitted", "True"
            )
            assert admitted["reason"] == "Admitted"
            started = await job_when(kubectl, "team-a", job, suspended=False)
            assert started["spec"]["template"]["spec"]["nodeSelector"] == {"muster.dev/pool": pool}
