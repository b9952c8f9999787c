"""A bare Kueue Workload's pods created on their nodes on Kubernetes (issue 19): every service
on a real nats-server against the API-server stand-in, the Workload applied with kubectl;
gang-permit places it before its pods exist and the binder creates each pod bound, in one
write (no pods/binding); the test is the kubelet that runs them. A Job's pods stay the Job
controller's: unsuspended, then bound."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_services_helpers import (
    condition_when,
    job_when,
    pods_bound,
    running_stack,
    workload_of_job,
)

pytestmark = pytest.mark.timeout(60)

EXAMPLES = Path(__file__).resolve().parents[2] / "k8s" / "examples"
BARE = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {name: bare, namespace: team-a}
spec:
  queueName: lq-team-a
  podSets:
  - name: main
    count: 2
    template:
      spec:
        restartPolicy: Never
        containers: [{name: main, image: busybox:1.36, resources: {requests: {cpu: "2"}}}]
"""


def node(name: str, *, cpu: int) -> str:
    return f"""
apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}
status:
  capacity: {{cpu: "{cpu}", memory: 16Gi, ephemeral-storage: 100Gi, pods: "110"}}
  conditions: [{{type: Ready, status: "True"}}]
"""


# The bare Workload's two pods of 2 CPUs: one on each of node-1 and node-2; the example Job of
# team-a (three pods of 1 CPU): node-3.
NODES = "---".join(node(n, cpu=c) for n, c in (("node-1", 2), ("node-2", 2), ("node-3", 3)))
JOB = (EXAMPLES / "jobs.yaml").read_text().split("---")[0]  # sample-job-team-a
PODS = ["bare-main-0", "bare-main-1"]


async def test_a_bare_workloads_pods_are_created_on_their_nodes_and_a_jobs_are_bound(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path) as stack:
        server, kubectl, events = stack.server, stack.kubectl, stack.events
        await kubectl.apply((EXAMPLES / "two-teams.yaml").read_text())
        await kubectl.apply(NODES)
        await kubectl.apply(BARE)
        await condition_when(kubectl, "Workload", "bare", "team-a", "Admitted", "True")
        await events.wait_for("team-a/bare", "workload.bound")
        [permitted] = events.of("team-a/bare", "workload.gang_permitted")
        assert permitted.gang_permitted.create
        placed = {b.pod.name: b.node for b in permitted.gang_permitted.bindings}
        assert sorted(placed) == PODS
        assert sorted(placed.values()) == ["node-1", "node-2"]
        for name in PODS:
            created = await kubectl.get("Pod", name, "team-a")
            assert created is not None
            assert created["spec"]["nodeName"] == placed[name]
            assert created["spec"]["schedulerName"] == "muster"
        assert server.requests.count(verb="create", path="/pods/[^/]+/binding$") == 0

        # The kubelet runs them: the workload runs, as one whose pods were bound.
        for name in PODS:
            await kubectl.set_pod_phase("team-a", name, "Running")
        await events.wait_for("team-a/bare", "workload.running")

        # A Job's pods are its controller's: its Workload is not placed before they exist.
        await kubectl.apply(JOB)
        wl = (await workload_of_job(kubectl, "team-a", "sample-job-team-a"))["metadata"]["name"]
        started = await job_when(kubectl, "team-a", "sample-job-team-a", suspended=False)
        job_pods = await kubectl.run_job_pods(started)
        assert await pods_bound(kubectl, "team-a", job_pods) == ["node-3"] * 3
        [job_permit] = await events.told(f"team-a/{wl}", "workload.gang_permitted")
        assert not job_permit.gang_permitted.create
        assert server.requests.count(verb="create", path="/pods/[^/]+/binding$") == 3
