"""Admission fair sharing on Kubernetes, every service running against the API-server stand-in:
a LocalQueue's `status.fairSharing.admissionFairSharingStatus` is re-sampled every
`usageSamplingInterval` while its job runs, as Kueue's LocalQueue controller does, though no
event changes anything in between."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import Kubectl, eventually, job_when, running_stack

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
---
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


async def sampled_after(kubectl: Kubectl, last_update: str) -> dict[str, Any]:
    """LocalQueue ml/lq's admissionFairSharingStatus once its lastUpdate is past
    `last_update` ("" for any) with some cpu consumed."""

    async def newer() -> dict[str, Any] | None:
        lq = await kubectl.get("LocalQueue", "lq", "ml") or {}
        fair = ((lq.get("status") or {}).get("fairSharing") or {}).get(
            "admissionFairSharingStatus"
        ) or {}
        consumed = fair.get("consumedResources") or {}
        return fair if "cpu" in consumed and fair["lastUpdate"] > last_update else None

    return await eventually(newer)


async def test_a_running_jobs_local_queue_usage_is_resampled_every_interval(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, kueue_config=CONFIG) as stack:
        await stack.kubectl.apply(QUEUES)
        await job_when(stack.kubectl, "ml", "train", suspended=False)  # admitted: it runs
        first = await sampled_after(stack.kubectl, "")
        # Nothing happens to the job from now on: only the samples move the status on.
        later = await sampled_after(stack.kubectl, first["lastUpdate"])
        cpu = [parse_quantity(s["consumedResources"]["cpu"]) for s in (first, later)]
        assert cpu[1] > cpu[0]  # 2 cpu running: its usage grows toward them
