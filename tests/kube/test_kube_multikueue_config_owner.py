"""A MultiKueue worker running its own Kueue, with queues of the manager's names (as Kueue's
MultiKueue workers do), changes none of the manager's: its watcher publishes them, admission
refuses them (`muster.core.config_owners`), and the manager's Jobs are admitted and run as
before. Same stack as test_kube_multikueue_e2e.py: stand-ins, one nats-server, every service."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kube_services_helpers import eventually, workload_of_job
from multikueue_stack import multikueue_stack
from test_kube_multikueue_e2e import JOB, NAMESPACE, TEST_S, check_of, running_pods, start_workers

pytestmark = pytest.mark.timeout(120)

# West's own Kueue: the manager's ClusterQueue and LocalQueue names, no quota at all.
WORKER_KUEUE = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: global}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 0}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: team-a}
spec: {clusterQueue: global}
"""


async def test_a_workers_own_queues_of_the_managers_names_change_nothing(
    tmp_path: Path,
) -> None:
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        await start_workers(stack)
        west = stack.clusters["west"].kubectl
        await west.apply(WORKER_KUEUE)

        async def published(kind: str, name: str, event: str) -> bool:
            return any(
                e.cluster == "west" and getattr(e, event.replace(".", "_")).name == name
                and getattr(e, event.replace(".", "_")).kind == kind
                for e in stack.events.seen
                if e.type == event
            )  # fmt: skip

        # West's watcher publishes its ClusterQueue (events are handled in stream order: the
        # Job's, after it, are decided with it refused), then its deletion.
        await eventually(
            lambda: published("ClusterQueue", "global", "config.applied"), timeout_s=20
        )
        await asyncio.to_thread(
            west.custom.delete_cluster_custom_object,
            "kueue.x-k8s.io", "v1beta1", "clusterqueues", "global",
        )  # fmt: skip
        await eventually(
            lambda: published("ClusterQueue", "global", "config.deleted"), timeout_s=20
        )
        await stack.manager.kubectl.apply(JOB)
        wl = (await workload_of_job(stack.manager.kubectl, NAMESPACE, "train"))["metadata"]
        check = await check_of(stack.manager.kubectl, wl["name"], "Ready")
        assert check["message"].startswith("dispatched to cluster east")
        await running_pods(stack.clusters["east"], f"{NAMESPACE}/{wl['name']}", 2)
