"""JobSets under MultiKueue on Kubernetes, end to end, as Kueue's JobSet MultiKueue adapter runs
them: a JobSet with `spec.managedBy: kueue.x-k8s.io/multikueue` applied on the manager is
admitted there and copied to the worker its check chose (managedBy removed, labelled with its
origin and the manager's Workload name), where the worker's JobSet controller runs it; the
manager's JobSet, left alone by its own controller, shows the copy's status; deactivated, the
copy is deleted; activated again, it runs again and its completion finishes the Workload.

The manager and its workers are API-server stand-ins with their Job and JobSet controllers
(`multikueue_stack`); the test plays the kubelet."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import Kubectl, condition, eventually, patch_active
from multikueue_stack import MANAGER, multikueue_stack, pods_of
from test_kube_jobsets_e2e import create, get_jobset, workload_of
from test_kube_multikueue_e2e import (
    NAMESPACE,
    TEST_S,
    active,
    check_of,
    namespaces_reported,
    running_pods,
    start_workers,
    status_of,
    succeed,
)

from muster.api.jobset import JOBSET_API_VERSION

pytestmark = pytest.mark.timeout(120)

MANAGED_BY = "kueue.x-k8s.io/multikueue"


def managed_jobset(name: str = "train", *, workers: int = 2) -> dict[str, Any]:
    """A suspended JobSet queued to `main` and managed by MultiKueue: a driver Job of one pod
    and `workers` worker Jobs of one pod each, 1 cpu a pod."""
    template = {
        "spec": {
            "schedulerName": "muster",
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ],
        }
    }
    job = {"spec": {"parallelism": 1, "completions": 1, "template": template}}
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"kueue.x-k8s.io/queue-name": "main"},
        },
        "spec": {
            "suspend": True,
            "managedBy": MANAGED_BY,
            "replicatedJobs": [
                {"name": "driver", "replicas": 1, "template": job},
                {"name": "workers", "replicas": workers, "template": job},
            ],
        },
    }


async def jobset_status(kubectl: Kubectl, name: str, **counts: int) -> dict[str, Any]:
    """JobSet `name`'s status once its replicatedJobsStatus sums to `counts` (active=3...),
    or has condition `<type>` True when a count is given as `<type>=1`."""

    async def has() -> dict[str, Any] | None:
        status = ((await get_jobset(kubectl, name)) or {}).get("status") or {}
        rows = status.get("replicatedJobsStatus") or []
        true = {c["type"] for c in status.get("conditions") or [] if c["status"] == "True"}
        for field, wanted in counts.items():
            found = int(field in true) if field[0].isupper() else sum(r[field] for r in rows)
            if found != wanted or not rows:
                return None
        return status

    return await eventually(has)


async def gone(kubectl: Kubectl) -> bool:
    """Whether JobSet `train` is gone from `kubectl`'s cluster."""
    return await get_jobset(kubectl, "train") is None


async def test_a_multikueue_jobset_runs_in_a_worker_is_stopped_there_and_finishes_on_the_manager(
    tmp_path: Path,
) -> None:
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        await start_workers(stack)
        manager, east = stack.manager.kubectl, stack.clusters["east"]
        await active(manager, "east", "True")
        await create(manager, managed_jobset())
        wl = await workload_of(manager, "train")
        key = f"{NAMESPACE}/{wl}"

        # Admitted on the manager, dispatched to east, created there from the manager's JobSet.
        admitted = await status_of(manager, wl, Admitted="True")
        assert admitted["status"]["clusterName"] == "east"
        assert (await check_of(manager, wl, "Ready"))["message"].startswith(
            "dispatched to cluster east"
        )
        copy = await eventually(lambda: get_jobset(east.kubectl, "train"))
        labels = copy["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/multikueue-origin"] == MANAGER
        assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == wl
        assert copy["spec"]["suspend"] is False
        assert "managedBy" not in copy["spec"]  # east's JobSet controller runs it

        # Its three pods run in east; the manager's JobSet stays suspended, has no child Job,
        # and shows east's counts.
        pods = await running_pods(east, key, 3)
        running = await jobset_status(manager, "train", active=3)
        assert [r["name"] for r in running["replicatedJobsStatus"]] == ["driver", "workers"]
        assert (await get_jobset(manager, "train") or {})["spec"]["suspend"] is True
        assert await manager.get("Job", "train-driver-0", NAMESPACE) is None
        assert pods_of(await manager.list_pods(NAMESPACE), key) == []

        # Deactivated (kueuectl stop workload): evicted, east's copy deleted, and the
        # manager's JobSet runs nothing any more.
        await patch_active(manager, NAMESPACE, wl, False)
        await status_of(manager, wl, Evicted="True")

        await eventually(lambda: gone(east.kubectl))
        await jobset_status(manager, "train", active=0, ready=0)
        # Its quota given back once east's pods are gone; until the manager shows that, it
        # still shows Admitted True in east, which a readmission's status must not be taken for.
        await status_of(manager, wl, Admitted="False", QuotaReserved="False")

        # Resumed: dispatched again (to east, or to west while east's old pods still hold
        # their room), a new copy runs there; it completes, so does the manager's JobSet, its
        # Workload finishes, and the copy is removed.
        await patch_active(manager, NAMESPACE, wl, True)
        readmitted = await status_of(manager, wl, Admitted="True")
        there = stack.clusters[readmitted["status"]["clusterName"]]
        pods = await running_pods(there, key, 3)
        await succeed(there, pods)
        done = await jobset_status(manager, "train", Completed=1, succeeded=3)
        assert condition({"status": done}, "Completed")["status"] == "True"
        finished = await status_of(manager, wl, Finished="True")
        assert condition(finished, "Finished")["reason"] == "Succeeded"
        await eventually(lambda: gone(there.kubectl))
        assert await gone(stack.clusters["east" if there.name == "west" else "west"].kubectl)


async def test_a_multikueue_jobset_is_not_copied_where_its_namespace_is_missing(
    tmp_path: Path,
) -> None:
    """East has no namespace team-a: the JobSet is passed over there, the check says why, and
    its copy runs in west."""
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        await start_workers(stack, east_namespace="team-b")
        manager, west = stack.manager.kubectl, stack.clusters["west"]
        await namespaces_reported(stack, "east")
        await create(manager, managed_jobset())
        wl = await workload_of(manager, "train")
        check = await check_of(manager, wl, "Ready")
        assert check["message"] == (
            "dispatched to cluster west: the first listed with room; "
            "not east: namespace team-a does not exist there"
        )
        await running_pods(west, f"{NAMESPACE}/{wl}", 3)
        assert await gone(stack.clusters["east"].kubectl)


async def test_a_worker_without_the_jobset_crd_refuses_the_copy_saying_so_and_west_runs_it(
    tmp_path: Path,
) -> None:
    """East serves no jobsets resource (the JobSet CRD not installed): its 404 is told apart
    from a missing namespace's, the manager's check says so, and the copy runs in west."""
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        stack.clusters["east"].server.registry.remove(("jobset.x-k8s.io", "jobsets"))
        await start_workers(stack)
        manager, west = stack.manager.kubectl, stack.clusters["west"]
        await active(manager, "east", "True")
        await create(manager, managed_jobset())
        wl = await workload_of(manager, "train")

        await stack.events.wait_for(f"{NAMESPACE}/{wl}", "workload.gang_rejected")
        (rejected,) = stack.events.of(f"{NAMESPACE}/{wl}", "workload.gang_rejected")
        assert rejected.gang_rejected.message == (
            f"cluster east: JobSet/{NAMESPACE}/train: the JobSet CRD "
            "(jobsets.jobset.x-k8s.io/v1alpha2) is not installed in this cluster"
        )

        async def sent_west() -> str | None:
            message = str((await check_of(manager, wl, "Ready"))["message"])
            return message if message.startswith("dispatched to cluster west") else None

        assert await eventually(sent_west) == (
            "dispatched to cluster west: the first listed with room; not east: refused it "
            f"({rejected.gang_rejected.message})"
        )
        await running_pods(west, f"{NAMESPACE}/{wl}", 3)


async def test_a_jobset_deleted_on_the_manager_mid_copy_leaves_no_copy_and_nothing_stuck(
    tmp_path: Path,
) -> None:
    """Attack: east's API server fails the copy's first creates, and the manager's JobSet is
    deleted while the binder retries; its retry creates the copy after the deletion, and that
    late copy must go. A JobSet of the same name submitted again then runs."""
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        east = stack.clusters["east"]
        east.server.faults.fail_next(3, status=500, verb="create", path="/jobsets")
        await start_workers(stack)
        manager = stack.manager.kubectl
        await active(manager, "east", "True")
        await create(manager, managed_jobset())
        wl = await workload_of(manager, "train")

        def creates(code: int) -> int:
            return east.server.requests.count(verb="create", path="/jobsets$", code=code)

        async def copying() -> bool:
            return creates(500) > 0

        await eventually(copying)  # mid-copy: east refused a create
        await asyncio.to_thread(
            manager.custom.delete_namespaced_custom_object,
            "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", "train",
        )  # fmt: skip

        async def copied_late() -> bool:
            return creates(201) > 0

        await eventually(copied_late)
        await eventually(lambda: gone(east.kubectl))

        async def workload_gone() -> bool:  # its own deletion, apart from the copy's
            return await manager.get("Workload", wl, NAMESPACE) is None

        await eventually(workload_gone)

        # Submitted again: admitted, copied and bound, as if the first had never been.
        await create(manager, managed_jobset())
        again = f"{NAMESPACE}/{await workload_of(manager, 'train')}"
        await stack.events.wait_for(again, "workload.bound")
