"""A Job's reclaimable pods on Kubernetes, end to end: every service on a real nats-server and
the API-server stand-in, the test as the Job controller (it writes the Job's succeeded count).
Kueue's job reconciler writes the Job's finished pods onto its Workload's
status.reclaimablePods (Kueue's Job rule: `api/job_reclaim.py`); muster's watcher does the same
on the Workload it created for the Job, and keeps its other status fields."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kube_services_helpers import condition, job_when, running_stack, status_when, workload_of_job
from test_kube_services_e2e import EVICTION, NODE

pytestmark = pytest.mark.timeout(60)

# Three pods at a time for four completions: once two succeeded, two remain to run and one
# of the three pods' quota is no longer needed; once three, two.
JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: sweep
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: lq}
spec:
  suspend: true
  parallelism: 3
  completions: 4
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers: [{name: main, image: busybox:1.36, resources: {requests: {cpu: "1"}}}]
"""


async def test_a_jobs_succeeded_pods_are_its_workloads_reclaimable_pods(tmp_path: Path) -> None:
    async with running_stack(tmp_path) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(EVICTION + "---" + NODE + "---" + JOB)
        await job_when(kubectl, "ml", "sweep", suspended=False)
        name = (await workload_of_job(kubectl, "ml", "sweep"))["metadata"]["name"]

        async def succeeded(count: int) -> None:
            body = {"status": {"active": 1, "succeeded": count}}
            await asyncio.to_thread(kubectl.batch.patch_namespaced_job_status, "sweep", "ml", body)

        await succeeded(2)
        await status_when(
            kubectl, "Workload", name, "ml", reclaimablePods=[{"name": "main", "count": 1}]
        )
        await succeeded(3)
        wl = await status_when(
            kubectl, "Workload", name, "ml", reclaimablePods=[{"name": "main", "count": 2}]
        )
        # Written beside muster's conditions and admission, not over them.
        assert condition(wl, "QuotaReserved")["status"] == "True"
        assert wl["status"]["admission"]["clusterQueue"] == "cq"
        key = f"ml/{name}"
        told = await stack.events.told(key, "workload.reclaimable_pods")
        assert [[(p.pod_set, p.count) for p in e.reclaimable_pods.pods] for e in told] == [
            [("main", 1)],
            [("main", 2)],
        ]
