"""Admission fair sharing on Kubernetes, every service running against the API-server stand-in:
a LocalQueue's `status.fairSharing.admissionFairSharingStatus` is re-sampled every
`usageSamplingInterval` while its job runs, as Kueue's LocalQueue controller does, though no
event changes anything in between; and it follows a Job's reclaimable pods, as admission's
usage does (Kueue's LocalQueue usage counts a podset's pods less its reclaimable ones)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import (
    Kubectl,
    eventually,
    job_when,
    running_stack,
    status_when,
    workload_of_job,
)
from test_kube_reclaimable_e2e import JOB as SWEEP  # three 1-cpu pods, four completions

from muster.api.quantity import parse_quantity

pytestmark = pytest.mark.timeout(60)

CONFIG = """
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
admissionFairSharing: {usageHalfLifeTime: 10m, usageSamplingInterval: 1s}
"""
QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: shared}
spec:
  namespaceSelector: {}
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
---
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: ml}
spec: {clusterQueue: shared}
"""
JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: lq}
spec:
  suspend: true
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers: [{name: main, image: busybox:1.36, resources: {requests: {cpu: "2"}}}]
"""


# A half-life of seconds: the usage moves visibly toward what runs within the test.
FAST_CONFIG = CONFIG.replace("usageHalfLifeTime: 10m", "usageHalfLifeTime: 2s")


async def sampled_when(
    kubectl: Kubectl, ok: Callable[[dict[str, Any], float], bool]
) -> dict[str, Any]:
    """LocalQueue ml/lq's admissionFairSharingStatus once `ok(status, its cpu in cores)`."""

    async def seen() -> dict[str, Any] | None:
        lq = await kubectl.get("LocalQueue", "lq", "ml") or {}
        fair = ((lq.get("status") or {}).get("fairSharing") or {}).get(
            "admissionFairSharingStatus"
        ) or {}
        cpu = (fair.get("consumedResources") or {}).get("cpu")
        return fair if cpu is not None and ok(fair, cores(fair)) else None

    return await eventually(seen)


def cores(fair: dict[str, Any]) -> float:
    return parse_quantity(fair["consumedResources"]["cpu"]) / 1000


async def sampled_after(kubectl: Kubectl, last_update: str) -> dict[str, Any]:
    """LocalQueue ml/lq's admissionFairSharingStatus once its lastUpdate is past
    `last_update` ("" for any) with some cpu consumed."""
    return await sampled_when(kubectl, lambda fair, _: fair["lastUpdate"] > last_update)


async def test_a_running_jobs_local_queue_usage_is_resampled_every_interval(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, kueue_config=CONFIG) as stack:
        await stack.kubectl.apply(QUEUES + "---" + JOB)
        await job_when(stack.kubectl, "ml", "train", suspended=False)  # admitted: it runs
        first = await sampled_after(stack.kubectl, "")
        # Nothing happens to the job from now on: only the samples move the status on, one an
        # interval after the other (Kueue's LocalQueue controller); wait for a later one that grew.
        start = cores(first)
        later = await sampled_when(
            stack.kubectl,
            lambda fair, cpu: fair["lastUpdate"] > first["lastUpdate"] and cpu > start,
        )
        assert start < cores(later) < 2  # 2 cpu running: its usage grows toward them


async def test_a_jobs_reclaimed_pods_lower_its_local_queues_usage(tmp_path: Path) -> None:
    async with running_stack(tmp_path, kueue_config=FAST_CONFIG) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(QUEUES + "---" + SWEEP)
        await job_when(kubectl, "ml", "sweep", suspended=False)
        # Three cpu run: the usage grows toward them, past where one cpu would take it.
        grown = cores(await sampled_when(kubectl, lambda _, cpu: cpu > 1.5))
        # One completion left to run: two of the three pods' quota is no longer needed.
        body = {"status": {"active": 1, "succeeded": 3}}  # as the Job controller counts them
        await asyncio.to_thread(kubectl.batch.patch_namespaced_job_status, "sweep", "ml", body)
        name = (await workload_of_job(kubectl, "ml", "sweep"))["metadata"]["name"]
        await status_when(
            kubectl, "Workload", name, "ml", reclaimablePods=[{"name": "main", "count": 2}]
        )
        # One cpu runs from now on: the usage falls toward it (held at admission, it would
        # keep growing toward three).
        await sampled_when(kubectl, lambda _, cpu: cpu < grown)
