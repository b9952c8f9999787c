"""MultiKueue on Kubernetes, end to end: a manager cluster and worker clusters, each an API-server
stand-in with its Job controller, on one nats-server, every service started from its own flags.
Kueue's MultiKueue objects go into the manager as an operator writes them; a Job submitted
there runs in a worker and finishes on the manager (issue 16).

East is served from the manager's side (`--multikueue-cluster east`: its API server is the one
its MultiKueueCluster's kubeconfig Secret names); west from its own API server, as from inside
it. The test plays the kubelet: it sets the phases of the pods muster bound."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import present
from kube_services_helpers import (
    Kubectl,
    condition,
    eventually,
    job_when,
    patch_active,
    workload_of_job,
)
from multikueue_stack import (
    MANAGER,
    Cluster,
    MultiKueueStack,
    kubeconfig,
    multikueue_stack,
    pods_of,
    secret,
)

pytestmark = pytest.mark.timeout(120)
TEST_S = 90.0  # a step that hangs fails where it hangs, before pytest-timeout

NAMESPACE = "team-a"
MANAGER_OBJECTS = """
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: muster}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {name: dispatch}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: workers}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: MultiKueueConfig
metadata: {name: workers}
spec: {clusters: [east, west]}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: MultiKueueCluster
metadata: {name: east}
spec:
  kubeConfig: {locationType: Secret, location: east-kubeconfig}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: MultiKueueCluster
metadata: {name: west}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: global}
spec:
  namespaceSelector: {}
  admissionChecks: [dispatch]
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: team-a}
spec: {clusterQueue: global}
"""
WORKER_NAMESPACE = """
apiVersion: v1
kind: Namespace
metadata: {name: NAMESPACE}
"""
WORKER_NODE = """
apiVersion: v1
kind: Node
metadata: {name: NODE, labels: {kubernetes.io/hostname: NODE}}
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"""
JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: main}
spec:
  suspend: true
  parallelism: 2
  completions: 2
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers: [{name: main, image: busybox:1.36, resources: {requests: {cpu: "1"}}}]
"""
# As Kueue's webhook makes a Job queued to a ClusterQueue with a MultiKueue check.
MANAGED_JOB = JOB.replace(
    "  suspend: true\n", "  suspend: true\n  managedBy: kueue.x-k8s.io/multikueue\n"
)


async def start_workers(
    stack: MultiKueueStack, *, east_kubeconfig: str | None = None, east_namespace: str = NAMESPACE
) -> None:
    """East from the manager's side with its kubeconfig Secret; west from its own API server.
    Each has one node and namespace team-a (east `east_namespace` instead, when told)."""
    manager = stack.manager.kubectl
    await manager.apply(MANAGER_OBJECTS)
    config = (
        east_kubeconfig
        if east_kubeconfig is not None
        else kubeconfig(stack.clusters["east"].server.url)
    )
    key = "kubeconfig" if east_kubeconfig is None else "config"  # the wrong key, when told
    await manager.apply(secret("east-kubeconfig", {key: config}))
    for name in ("east", "west"):
        namespace = east_namespace if name == "east" else NAMESPACE
        await stack.clusters[name].kubectl.apply(
            WORKER_NAMESPACE.replace("NAMESPACE", namespace)
            + "---"
            + WORKER_NODE.replace("NODE", f"{name}-1")
        )
    await stack.start_services("east", from_manager=True, reachable=east_kubeconfig is None)
    await stack.start_services("west")


async def running_pods(cluster: Cluster, workload: str, count: int) -> list[str]:
    """The names of `workload`'s pods in `cluster` once `count` are bound to its node; the
    test, as the kubelet, then sets them Running."""

    async def bound() -> list[dict[str, Any]] | None:
        pods = pods_of(await cluster.kubectl.list_pods(NAMESPACE), workload)
        placed = [p for p in pods if p["spec"].get("nodeName") == f"{cluster.name}-1"]
        return placed if len(placed) == count else None

    names = [p["metadata"]["name"] for p in await eventually(bound, timeout_s=20)]
    for name in names:
        await cluster.kubectl.set_pod_phase(NAMESPACE, name, "Running")
    return names


async def succeed(cluster: Cluster, names: list[str]) -> None:
    for name in names:
        await cluster.kubectl.set_pod_phase(NAMESPACE, name, "Succeeded")


async def check_of(kubectl: Kubectl, workload: str, state: str) -> dict[str, Any]:
    """The manager's Workload's MultiKueue check entry, once in `state`."""

    async def entry() -> dict[str, Any] | None:
        wl = await kubectl.get("Workload", workload, NAMESPACE) or {}
        for found in (wl.get("status") or {}).get("admissionChecks") or []:
            if found["name"] == "dispatch" and found["state"] == state:
                return dict(found)
        return None

    return await eventually(entry, timeout_s=20)


async def status_of(
    kubectl: Kubectl, workload: str, *, cluster_name: str | None = None, **expected: Any
) -> dict[str, Any]:
    """The manager's Workload once its status has `expected` (conditions by type: status)
    and, unless None, `cluster_name` as status.clusterName ("": none)."""

    async def matches() -> dict[str, Any] | None:
        wl = await kubectl.get("Workload", workload, NAMESPACE) or {}
        for type_, status in expected.items():
            if condition(wl, type_).get("status") != status:
                return None
        named = (wl.get("status") or {}).get("clusterName", "")
        return wl if cluster_name is None or named == cluster_name else None

    return await eventually(matches, timeout_s=30)


async def active(kubectl: Kubectl, cluster: str, status: str) -> dict[str, Any]:
    """MultiKueueCluster `cluster`'s Active condition, once it has `status`."""

    async def holds() -> dict[str, Any] | None:
        found = condition(await kubectl.get("MultiKueueCluster", cluster), "Active")
        return found if found.get("status") == status else None

    return await eventually(holds, timeout_s=20)


async def event_notes(
    kubectl: Kubectl, workload: str, reason: str, *, including: str | None = None
) -> list[str]:
    """The notes of the manager's Events `reason` about Workload `workload`, once there is
    one (as `kubectl describe workload` lists them), or one that is `including` (an earlier
    note of that reason may come first: the check's Pending before its Ready)."""
    selector = f"involvedObject.kind=Workload,involvedObject.name={workload}"

    async def notes() -> list[str] | None:
        listed = await asyncio.to_thread(
            kubectl.core.list_namespaced_event, NAMESPACE, field_selector=selector
        )
        found = [present(e.message) for e in listed.items if e.reason == reason]
        return found if found and (including is None or including in found) else None

    return await eventually(notes, timeout_s=20)


async def stopped_by(stack: MultiKueueStack, key: str, source: str) -> bool:
    """Whether `source` reported `key`'s eviction completed."""
    return any(e.source == source for e in stack.events.of(key, "workload.eviction_completed"))


async def job_status(kubectl: Kubectl, name: str, **wanted: object) -> dict[str, Any]:
    """Job `name`'s status on `kubectl`'s cluster, once it has `wanted` (a field's value, or a
    condition's status by its type)."""

    async def has() -> dict[str, Any] | None:
        status = ((await kubectl.get("Job", name, NAMESPACE)) or {}).get("status") or {}
        true = {c["type"]: c["status"] for c in status.get("conditions") or []}
        ok = all(status.get(k) == v or true.get(k) == v for k, v in wanted.items())
        return status if ok else None

    return await eventually(has, timeout_s=20)


async def copy_gone(cluster: Cluster, name: str) -> None:
    async def gone() -> bool:
        return await cluster.kubectl.get("Job", name, NAMESPACE) is None

    await eventually(gone, timeout_s=20)


async def namespaces_reported(stack: MultiKueueStack, cluster: str) -> None:
    """Once `cluster`'s Namespaces are in the stream (what dispatch knows of them)."""

    async def reported() -> bool:
        return any(
            e.cluster == cluster and e.config_applied.kind == "Namespace"
            for e in stack.events.seen
            if e.type == "config.applied"
        )

    await eventually(reported, timeout_s=20)


async def test_a_job_submitted_on_the_manager_runs_in_a_worker_and_finishes_on_the_manager(
    tmp_path: Path,
) -> None:
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        await start_workers(stack)
        manager, east = stack.manager.kubectl, stack.clusters["east"]
        for name in ("east", "west"):
            condition_ = await active(manager, name, "True")
            assert (condition_["reason"], condition_["message"]) == ("Active", "Connected")
        await manager.apply(MANAGED_JOB)
        wl = (await workload_of_job(manager, NAMESPACE, "train"))["metadata"]["name"]
        key = f"{NAMESPACE}/{wl}"

        # Dispatched to east (listed first, with room), created there from the manager's Job.
        admitted = await status_of(manager, wl, Admitted="True")
        assert admitted["status"]["clusterName"] == "east"
        check = await check_of(manager, wl, "Ready")
        assert check["message"].startswith("dispatched to cluster east")
        copy = await eventually(lambda: east.kubectl.get("Job", "train", NAMESPACE))
        labels = copy["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/multikueue-origin"] == MANAGER
        assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == wl
        assert copy["spec"]["suspend"] is False
        assert "managedBy" not in copy["spec"]  # east's Job controller runs it
        assert copy["spec"]["template"]["metadata"]["labels"]["muster.dev/workload"] == wl

        # It runs in east, never on the manager, whose Job stays suspended and, managed by
        # MultiKueue, shows the copy's status: `kubectl get job` says it runs.
        pods = await running_pods(east, key, 2)
        await stack.events.wait_for(key, "workload.running")
        assert pods_of(await manager.list_pods(NAMESPACE), key) == []
        assert (await job_when(manager, NAMESPACE, "train", suspended=True))["spec"]["suspend"]
        running = await job_status(manager, "train", active=2)
        copied = present(await east.kubectl.get("Job", "train", NAMESPACE))["status"]
        assert running["startTime"] == copied["startTime"]

        # East's Job completes: the manager's Job says Complete as east's does, its Workload
        # Finished, and the copy is removed.
        await succeed(east, pods)
        done = await job_status(manager, "train", Complete="True", succeeded=2, active=0)
        assert done["completionTime"] >= done["startTime"] == running["startTime"]
        assert {c["type"] for c in done["conditions"]} == {"SuccessCriteriaMet", "Complete"}
        finished = await status_of(manager, wl, Finished="True")
        assert condition(finished, "Finished")["reason"] == "Succeeded"
        await copy_gone(east, "train")
        assert [e.cluster for e in stack.events.of(key, "workload.finished")] == ["east"]
        assert await stack.clusters["west"].kubectl.get("Job", "train", NAMESPACE) is None


async def test_a_worker_that_goes_away_mid_run_is_lost_and_its_job_runs_once_elsewhere(
    tmp_path: Path,
) -> None:
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        await start_workers(stack)
        manager, east, west = (stack.clusters[n] for n in (MANAGER, "east", "west"))
        await active(manager.kubectl, "east", "True")
        await manager.kubectl.apply(MANAGED_JOB)
        wl = (await workload_of_job(manager.kubectl, NAMESPACE, "train"))["metadata"]["name"]
        key = f"{NAMESPACE}/{wl}"
        await running_pods(east, key, 2)
        await job_status(manager.kubectl, "train", active=2)

        # East's API server goes away: its services say so, and past --cluster-lost-seconds
        # admission evicts the workload there (ClusterLost) and dispatches it to west.
        await east.stop_api_server()
        gone = await active(manager.kubectl, "east", "False")
        assert gone["reason"] == "ClientConnectionFailed"
        await stack.events.wait_for(key, "workload.evicted", timeout_s=20)
        (evicted,) = stack.events.of(key, "workload.evicted")
        assert (evicted.cluster, evicted.evicted.reason) == ("east", "ClusterLost")
        assert "unreachable for over" in evicted.evicted.message
        moved = await running_pods(west, key, 2)
        # West's admission, not the status east's still showed (Admitted stays True while the
        # eviction waits for east's pods): only the relocation names west.
        relocated = await status_of(manager.kubectl, wl, Admitted="True", cluster_name="west")
        assert condition(relocated, "Evicted")["status"] == "False"
        lost = await event_notes(manager.kubectl, wl, "EvictedDueToClusterLost")
        assert lost[0].startswith("worker cluster east was lost: unreachable for over 4s")
        assert [e.cluster for e in stack.events.of(key, "workload.admitted")] == ["east", "west"]
        # The manager's Job shows west's copy now.
        west_copy = await eventually(lambda: west.kubectl.get("Job", "train", NAMESPACE))
        started = await job_status(manager.kubectl, "train", active=2)
        assert started["startTime"] == (west_copy.get("status") or {}).get("startTime")

        # East returns: the eviction that waited for it deletes the stale copy there; what
        # east says meanwhile about it counts for nothing, and it never starts there again.
        await east.start_api_server()
        await copy_gone(east, "train")
        await active(manager.kubectl, "east", "True")
        await eventually(lambda: stopped_by(stack, key, "binder/east"))  # east's own word
        await succeed(west, moved)
        finished = await status_of(manager.kubectl, wl, Finished="True")
        assert finished["status"].get("clusterName") == "west"
        await job_status(manager.kubectl, "train", Complete="True", succeeded=2)
        await copy_gone(west, "train")
        assert [e.cluster for e in stack.events.of(key, "workload.admitted")] == ["east", "west"]
        assert [e.cluster for e in stack.events.of(key, "workload.finished")] == ["west"]
        assert pods_of(await east.kubectl.list_pods(NAMESPACE), key) == []


async def test_a_worker_whose_kubeconfig_secret_is_wrong_shows_why_on_the_manager(
    tmp_path: Path,
) -> None:
    # East is unreachable from its start; past --cluster-lost-seconds admission calls it lost
    # ("not east: lost: ..."), which a loaded machine reached before the Job's dispatch with
    # the stack's 4 s. Here it is never lost while the test runs: the check says why east was
    # passed over, however slowly the steps before it go.
    never_lost_s = 10 * TEST_S
    stack_of = multikueue_stack(tmp_path, "east", "west", lost_after_s=never_lost_s)
    async with stack_of as stack, asyncio.timeout(TEST_S):
        east_url = stack.clusters["east"].server.url
        await start_workers(stack, east_kubeconfig=kubeconfig(east_url))  # under the wrong key
        manager = stack.manager.kubectl
        why = "Secret muster/east-kubeconfig: key 'kubeconfig' not found"
        bad = await active(manager, "east", "False")
        assert (bad["reason"], bad["message"]) == ("BadKubeConfig", why)
        await manager.apply(JOB)
        wl = (await workload_of_job(manager, NAMESPACE, "train"))["metadata"]["name"]
        check = await check_of(manager, wl, "Ready")
        assert check["message"] == (
            "dispatched to cluster west: the first listed with room; "
            f"not east: not reachable now: {why}"
        )
        notes = await event_notes(manager, wl, "MultiKueue", including=check["message"])
        assert check["message"] in notes

        # The Secret put right, east is reached without a restart.
        fixed = {"kubeconfig": kubeconfig(east_url)}
        await manager.replace_secret("muster", "east-kubeconfig", fixed)
        assert (await active(manager, "east", "True"))["reason"] == "Active"


async def test_a_worker_without_the_namespace_is_passed_over_and_the_check_says_so(
    tmp_path: Path,
) -> None:
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        await start_workers(stack, east_namespace="team-b")
        manager = stack.manager.kubectl
        # East's namespaces are in the stream before the Job's submission, so dispatch knows.
        await namespaces_reported(stack, "east")
        await manager.apply(JOB)
        wl = (await workload_of_job(manager, NAMESPACE, "train"))["metadata"]["name"]
        check = await check_of(manager, wl, "Ready")
        assert check["message"] == (
            "dispatched to cluster west: the first listed with room; "
            "not east: namespace team-a does not exist there"
        )
        await running_pods(stack.clusters["west"], f"{NAMESPACE}/{wl}", 2)
        assert await stack.clusters["east"].kubectl.get("Job", "train", NAMESPACE) is None
        assert (await status_of(manager, wl, Admitted="True"))["status"]["clusterName"] == "west"

        # Deactivated (`kueuectl stop workload`): evicted, its copy removed from west, and,
        # as Kueue's eviction unsets it, its Workload names no cluster while it is inactive.
        await patch_active(manager, NAMESPACE, wl, False)
        stopped = await status_of(manager, wl, cluster_name="", QuotaReserved="False")
        assert condition(stopped, "Evicted")["reason"] == "Deactivated"
        assert condition(stopped, "Admitted")["status"] == "False"
        await copy_gone(stack.clusters["west"], "train")


async def test_a_job_runs_once_in_a_worker_through_errors_and_dropped_watches_everywhere(
    tmp_path: Path,
) -> None:
    async with multikueue_stack(tmp_path, "east", "west") as stack, asyncio.timeout(TEST_S):
        await start_workers(stack)
        manager, east = stack.manager, stack.clusters["east"]
        await active(manager.kubectl, "east", "True")
        # The manager throttles and fails status writes and cuts its watches; east fails the
        # copy's creation, its reads and cuts its watches.
        manager.server.faults.fail_next(2, status=429, retry_after_s=0, verb="patch")
        manager.server.faults.fail_next(2, status=500, verb="update")
        manager.server.faults.drop_next_watch(3, after_events=1)
        east.server.faults.fail_next(2, status=500, verb="create", path="/jobs$")
        east.server.faults.fail_next(2, status=429, retry_after_s=0, verb="get")
        east.server.faults.drop_next_watch(3, after_events=1)
        await manager.kubectl.apply(JOB)
        wl = (await workload_of_job(manager.kubectl, NAMESPACE, "train"))["metadata"]["name"]
        key = f"{NAMESPACE}/{wl}"

        pods = await running_pods(east, key, 2)
        await succeed(east, pods)
        finished = await status_of(manager.kubectl, wl, Finished="True")
        assert finished["status"]["clusterName"] == "east"
        await copy_gone(east, "train")
        assert east.server.faults.injected >= 4
        assert manager.server.faults.injected >= 2
        assert [e.cluster for e in stack.events.of(key, "workload.admitted")] == ["east"]
        assert [e.cluster for e in stack.events.of(key, "workload.finished")] == ["east"]
        # Not managed by MultiKueue: the manager's Job shows nothing of the copy's status.
        own = present(await manager.kubectl.get("Job", "train", NAMESPACE))["status"]
        assert not own.get("succeeded")
        assert "Complete" not in [c["type"] for c in own.get("conditions") or []]
