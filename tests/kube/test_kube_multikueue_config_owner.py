"""A MultiKueue worker running its own Kueue, with queues of the manager's names (as Kueue's
MultiKueue workers do), changes none of the manager's: its watcher publishes them, admission
refuses them (`muster.core.config_owners`), and the manager's Jobs are admitted and run as
before. Same stack as test_kube_multikueue_e2e.py: stand-ins, one nats-server, every service."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from kube_services_helpers import eventually, workload_of_job
from multikueue_stack import multikueue_stack
from test_kube_multikueue_e2e import (
    JOB,
    MANAGER_OBJECTS,
    NAMESPACE,
    TEST_S,
    check_of,
    running_pods,
    start_workers,
)

pytestmark = pytest.mark.timeout(120)


def worker_kueue() -> str:
    """West's own Kueue: the manager's flavor, ClusterQueue and LocalQueue, of no quota and
    without the MultiKueue check."""
    docs = [
        d
        for d in yaml.safe_load_all(MANAGER_OBJECTS)
        if d["kind"] in ("ResourceFlavor", "ClusterQueue", "LocalQueue")
    ]
    for doc in docs:
        if doc["kind"] == "ClusterQueue":
            del doc["spec"]["admissionChecks"]
            doc["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 0
    return yaml.safe_dump_all(docs)


async def test_a_workers_own_queues_of_the_managers_names_change_nothing(
    tmp_path: Path,
) -> None:
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        await start_workers(stack)
        west = stack.clusters["west"].kubectl
        await west.apply(worker_kueue())

        async def published(kind: str, name: str, event: str) -> bool:
            return any(
                e.cluster == "west" and getattr(e, event.replace(".", "_")).name == name
                and getattr(e, event.replace(".", "_")).kind == kind
                for e in stack.events.seen
                if e.type == event
            )  # fmt: skip

        # West's watcher publishes its ClusterQueue (events are handled in stream order: the
        # Job's, after it, are decided with it refused), then its deletion.
        await eventually(lambda: published("ClusterQueue", "global", "config.applied"))
        await asyncio.to_thread(
            west.custom.delete_cluster_custom_object,
            "kueue.x-k8s.io", "v1beta1", "clusterqueues", "global",
        )  # fmt: skip
        await eventually(lambda: published("ClusterQueue", "global", "config.deleted"))
        await stack.manager.kubectl.apply(JOB)
        wl = (await workload_of_job(stack.manager.kubectl, NAMESPACE, "train"))["metadata"]
        check = await check_of(stack.manager.kubectl, wl["name"], "Ready")
        assert check["message"].startswith("dispatched to cluster east")
        await running_pods(stack.clusters["east"], f"{NAMESPACE}/{wl['name']}", 2)
