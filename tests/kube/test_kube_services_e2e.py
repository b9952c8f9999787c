"""muster on Kubernetes, end to end: every service on a real nats-server, watcher, gangpermit
and binder started with `--cluster-backend kube` against the API-server stand-in, driven as an
operator drives a cluster (the examples of `k8s/examples` applied with the official client),
with the test as the Job controller (it makes an unsuspended Job's pods and completes it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import (
    Stack,
    condition,
    condition_when,
    eventually,
    job_when,
    pods_bound,
    running_stack,
    status_when,
    workload_of_job,
)

from muster.api.check_states import format_time
from muster.bus import DLQ_STREAM, new_event
from muster.contracts.v1 import events_pb2 as pb
from muster.core.requeue_state import requeue_end_s

pytestmark = pytest.mark.timeout(60)

EXAMPLES = Path(__file__).resolve().parents[2] / "k8s" / "examples"
NODE = """
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {kubernetes.io/hostname: node-1, pool: batch}}
status:
  capacity: {cpu: "16", memory: 64Gi, ephemeral-storage: 200Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"""
# A pod kube-scheduler placed (it names no scheduler and is bound when created): room taken.
FOREIGN_POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  nodeName: node-1
  containers: [{name: web, image: nginx:1.27, resources: {requests: {cpu: "8"}}}]
"""
LOST_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: lost
  namespace: team-a
  labels: {kueue.x-k8s.io/queue-name: no-such-queue}
spec:
  suspend: true
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers: [{name: main, image: busybox:1.36, resources: {requests: {cpu: "1"}}}]
"""
# Once-only facts: none may be lost or published twice, whatever the API server does. (No
# `quota_reserved`: with no check to pass, the `admitted` tells it.)
ONCE = (
    "workload.submitted",
    "workload.admitted",
    "workload.gang_permitted",
    "workload.bound",
    "workload.running",  # and ready: no pods_ready (docs/events.md)
    "workload.finished",
)


def usage(status: dict[str, Any], field: str = "flavorsUsage") -> dict[str, str]:
    return {
        f"{f['name']}/{r['name']}": r["total"]
        for f in status.get(field) or []
        for r in f["resources"]
    }


async def test_the_two_team_example_is_admitted_placed_bound_and_finished(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path) as stack:
        server, kubectl, events = stack.server, stack.kubectl, stack.events
        # A flaky API server meanwhile: each write path fails a few times (429s and 500s).
        server.faults.fail_next(2, status=500, verb="create", path="/workloads$")
        server.faults.fail_next(3, status=429, verb="patch", path=r"kueue\.x-k8s\.io/.*/status$")
        server.faults.fail_next(2, status=500, verb="update", path="/jobs/")
        server.faults.fail_next(2, status=429, verb="create", path="/binding$")
        await kubectl.apply((EXAMPLES / "two-teams.yaml").read_text())
        await kubectl.apply(NODE + "---" + FOREIGN_POD)
        await kubectl.set_pod_phase("default", "web", "Running")
        await kubectl.apply((EXAMPLES / "jobs.yaml").read_text() + "---" + LOST_JOB)

        # Each queued Job gets its Kueue Workload, owned by the Job, admitted, and unsuspended.
        teams = {"team-a": "sample-job-team-a", "team-b": "sample-job-team-b"}
        names = {ns: (await workload_of_job(kubectl, ns, job))["metadata"]["name"]
                 for ns, job in teams.items()}  # fmt: skip
        for ns, wl in names.items():
            admitted = await condition_when(kubectl, "Workload", wl, ns, "Admitted", "True")
            assert admitted["reason"] == "Admitted"
            stored = await kubectl.get("Workload", wl, ns)
            assert stored is not None
            (assignment,) = stored["status"]["admission"]["podSetAssignments"]
            assert stored["status"]["admission"]["clusterQueue"] == "cluster-queue"
            assert (assignment["count"], assignment["flavors"]["cpu"]) == (3, "default-flavor")
            assert condition(stored, "QuotaReserved")["status"] == "True"
        jobs = {ns: await job_when(kubectl, ns, job, suspended=False) for ns, job in teams.items()}

        # A Job naming a LocalQueue that does not exist stays suspended; its Workload says why.
        lost = (await workload_of_job(kubectl, "team-a", "lost"))["metadata"]["name"]
        reserved = await condition_when(
            kubectl, "Workload", lost, "team-a", "QuotaReserved", "False"
        )
        assert reserved["reason"] == "Misconfigured"
        assert reserved["message"] == "LocalQueue no-such-queue doesn't exist"
        assert (await kubectl.get("Job", "lost", "team-a") or {})["spec"]["suspend"] is True

        # Every watch is cut mid-stream and the history compacted: resumes get 410 and list
        # again (their first lists fail too).
        server.faults.fail_next(3, status=500, verb="list")
        assert server.drop_watches() > 0
        server.compact()

        # The Job controller's part: the pods. team-a's 3 cpu fit beside kube-scheduler's pod
        # (8 of 16 cpu); team-b's 6 do not until that pod is gone.
        pods = {ns: await kubectl.run_job_pods(job) for ns, job in jobs.items()}
        assert set(await pods_bound(kubectl, "team-a", pods["team-a"])) == {"node-1"}
        await events.wait_for(f"team-b/{names['team-b']}", "workload.gang_waiting")
        for name in pods["team-b"]:
            assert not (await kubectl.get("Pod", name, "team-b") or {})["spec"].get("nodeName")
        await kubectl.delete_pod("default", "web")
        assert set(await pods_bound(kubectl, "team-b", pods["team-b"])) == {"node-1"}

        # (The lost Job's Workload is in no ClusterQueue: its queue does not exist.)
        cq = await status_when(
            kubectl, "ClusterQueue", "cluster-queue", admittedWorkloads=2, pendingWorkloads=0
        )
        assert usage(cq["status"])["default-flavor/cpu"] == "9"
        assert condition(cq, "Active")["status"] == "True"
        lq = await status_when(kubectl, "LocalQueue", "lq-team-b", "team-b", admittedWorkloads=1)
        assert usage(lq["status"], "flavorUsage")["default-flavor/cpu"] == "6"

        # They run, succeed, and their Jobs complete: Finished, the quota released.
        for ns, names_ in pods.items():
            for phase in ("Running", "Succeeded"):
                for name in names_:
                    await kubectl.set_pod_phase(ns, name, phase)
            await kubectl.complete_job(ns, teams[ns])
        for ns, wl in names.items():
            finished = await condition_when(kubectl, "Workload", wl, ns, "Finished", "True")
            assert finished["reason"] == "Succeeded"
        cq = await status_when(
            kubectl,
            "ClusterQueue",
            "cluster-queue",
            admittedWorkloads=0,
            reservingWorkloads=0,
            pendingWorkloads=0,
        )
        assert usage(cq["status"])["default-flavor/cpu"] == "0"
        await status_when(
            kubectl, "LocalQueue", "lq-team-a", "team-a", admittedWorkloads=0, pendingWorkloads=0
        )

        for ns, wl in names.items():
            # The pods' watch may run behind the Job's (its lists failed above): their running
            # (and ready) can come after the Job's finished.
            await events.wait_for(f"{ns}/{wl}", "workload.running")
            seen = [e.type for e in await events.told(f"{ns}/{wl}")]
            assert {t: seen.count(t) for t in ONCE} == dict.fromkeys(ONCE, 1), seen
        # muster's own status writes are no configuration change: each queue applied once.
        await events.caught_up()
        configs = [e.config_applied for e in events.seen if e.type == "config.applied"]
        queues = sorted(c.name for c in configs if c.kind.endswith("Queue"))
        assert queues == ["cluster-queue", "team-a/lq-team-a", "team-b/lq-team-b"]

        # Every injected failure is met: a watch whose list failed lists again after its
        # back-off, which may end after the workloads did.
        async def faults_met() -> bool:
            return server.faults.pending() == 0

        # Back-offs grow when the machine is loaded (every watch of the stack shares 2 cores).
        await eventually(faults_met)


EVICTION = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: batch}
spec:
  nodeLabels: {pool: batch}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: batch
      resources: [{name: cpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: low}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: ml}
spec: {clusterQueue: cq}
"""


def job_yaml(name: str, *, priority: str) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: ml
  labels: {{kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: {priority}}}
spec:
  suspend: true
  parallelism: 2
  completions: 2
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers: [{{name: main, image: busybox:1.36, resources: {{requests: {{cpu: "2"}}}}}}]
"""


async def test_a_higher_priority_job_preempts_and_the_victim_job_is_suspended(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(EVICTION + "---" + NODE + "---" + job_yaml("low", priority="low"))
        low = await job_when(kubectl, "ml", "low", suspended=False)
        template = low["spec"]["template"]
        assert template["spec"]["nodeSelector"] == {"pool": "batch"}  # the flavor's node label
        low_wl = (await workload_of_job(kubectl, "ml", "low"))["metadata"]["name"]
        assert template["metadata"]["labels"]["muster.dev/workload"] == low_wl
        low_pods = await kubectl.run_job_pods(low)
        await pods_bound(kubectl, "ml", low_pods)

        await kubectl.apply(job_yaml("high", priority="high"))
        await job_when(kubectl, "ml", "low", suspended=True)
        evicted = await condition_when(kubectl, "Workload", low_wl, "ml", "Evicted", "True")
        assert evicted["reason"] == "Preempted"
        for name in low_pods:  # the Job controller removes a suspended Job's pods
            await kubectl.delete_pod("ml", name)
        high = await job_when(kubectl, "ml", "high", suspended=False)
        await pods_bound(kubectl, "ml", await kubectl.run_job_pods(high))

        # Requeued, it waits for quota with Kueue's granular reason (on by default since v0.19).
        async def waiting() -> dict[str, Any] | None:
            found = condition(await kubectl.get("Workload", low_wl, "ml"), "QuotaReserved")
            return found if found.get("reason") == "WaitingForQuota" else None

        requeued = await eventually(waiting)
        assert requeued["status"] == "False"
        assert condition(await kubectl.get("Workload", low_wl, "ml"), "Admitted")["status"] == (
            "False"
        )
        await status_when(kubectl, "ClusterQueue", "cq", admittedWorkloads=1, pendingWorkloads=1)


async def test_a_node_the_binder_may_not_create_is_dead_lettered_by_name(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path) as stack:  # and the binder lives on (checked at exit)
        # The binder's ClusterRole does not grant Nodes: the API server answers 403.
        stack.server.faults.fail_next(1, status=403, verb="create", path="/nodes$")
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "solo", "namespace": "default"},
            "spec": {"schedulerName": "muster", "containers": [{"name": "c", "image": "x"}]},
        }
        command = pb.ApplyRequested(
            manifests_json=[json.dumps(node), json.dumps(pod)],
            submitter=pb.Submitter(user="ops", groups=["platform"]),
        )
        await stack.bus.publish(
            new_event("apply_requested", command, cluster="local", source="test")
        )

        async def dead() -> Any:
            info = await stack.bus.js.stream_info(DLQ_STREAM)
            return info.state.messages and await stack.bus.js.get_msg(DLQ_STREAM, 1)

        letter = await eventually(dead)
        assert letter.subject.endswith("binder-local-apply")
        assert "Node/n1" in letter.headers["Muster-Dlq-Reason"]
        assert "forbidden" in letter.headers["Muster-Dlq-Reason"].lower()
        assert await stack.kubectl.get("Pod", "solo", "default") is not None  # the rest applied


async def test_a_job_muster_cannot_read_is_dead_lettered_with_its_field(tmp_path: Path) -> None:
    # kubectl takes "1e30" cpu (the stand-in checks types, not quantities); muster counts in
    # milli-units below 2^63. The watcher used to log a warning only: the Job sat suspended
    # with no word anywhere a user or an operator looks.
    hostile = (EXAMPLES / "jobs.yaml").read_text().split("---")[0]
    hostile = hostile.replace("sample-job-team-a", "huge").replace('cpu: "1"', 'cpu: "1e30"')
    async with running_stack(tmp_path) as stack:
        kubectl = stack.kubectl
        await kubectl.apply((EXAMPLES / "two-teams.yaml").read_text() + "---" + NODE)
        await kubectl.apply(hostile)
        await kubectl.apply((EXAMPLES / "jobs.yaml").read_text())

        async def dead() -> Any:
            info = await stack.bus.js.stream_info(DLQ_STREAM)
            return info.state.messages and await stack.bus.js.get_msg(DLQ_STREAM, 1)

        letter = await eventually(dead)
        assert letter.subject == "muster.v1.dlq.watcher-local"
        assert letter.headers["Muster-Dlq-Reason"].startswith(
            "Job/team-a/huge: spec.template.spec.containers[0].resources.requests.cpu: "
        )
        await job_when(kubectl, "team-b", "sample-job-team-b", suspended=False)  # the rest runs
        assert (await kubectl.get("Job", "huge", "team-a") or {})["spec"]["suspend"] is True


# waitForPodsReady: readiness is the pods' Ready condition (what their readiness probes say),
# not their phase, as Kueue reads it; the test is the kubelet that writes it.


def pods_ready_config(timeout: str, recovery: str | None = None, *, requeuing: str = "") -> str:
    extra = f", recoveryTimeout: {recovery}" if recovery is not None else ""
    extra += f", requeuingStrategy: {requeuing}" if requeuing else ""
    return f"""
apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
waitForPodsReady: {{enable: true, timeout: {timeout}{extra}}}
"""


async def running_unready(stack: Stack) -> tuple[str, list[str]]:
    """Job `train` admitted, its pods bound and Running with their Ready condition False; its
    Workload's name and its pods."""
    kubectl = stack.kubectl
    await kubectl.apply(EVICTION + "---" + NODE + "---" + job_yaml("train", priority="low"))
    name = (await workload_of_job(kubectl, "ml", "train"))["metadata"]["name"]
    return name, await start_unready(stack, name)


async def start_unready(stack: Stack, name: str) -> list[str]:
    """Job `train` (Workload `name`) unsuspended: its pods bound and Running, not Ready."""
    kubectl = stack.kubectl
    job = await job_when(kubectl, "ml", "train", suspended=False)
    pods = await kubectl.run_job_pods(job)
    await pods_bound(kubectl, "ml", pods)
    for pod in pods:
        await kubectl.set_pod_phase("ml", pod, "Running", ready=False)
    await stack.events.wait_for(f"ml/{name}", "workload.running")
    return pods


async def stopped(stack: Stack, pods: list[str]) -> None:
    """The Job controller's part once `train` is suspended: its pods deleted."""
    await job_when(stack.kubectl, "ml", "train", suspended=True)
    for pod in pods:
        await stack.kubectl.delete_pod("ml", pod)


def said(found: dict[str, Any]) -> tuple[str, str, str]:
    return found["status"], found["reason"], found["message"]


WAITING = ("False", "WaitForStart", "Not all pods are ready or succeeded")


async def status_of(kubectl: Any, name: str) -> dict[str, Any]:
    """Workload `name`'s status in namespace ml."""
    workload = await kubectl.get("Workload", name, "ml")
    assert workload is not None, name
    status: dict[str, Any] = workload["status"]
    return status


async def test_pods_running_but_not_ready_are_evicted_at_the_timeout(tmp_path: Path) -> None:
    async with running_stack(tmp_path, kueue_config=pods_ready_config("1s")) as stack:
        name, _ = await running_unready(stack)
        (running,) = stack.events.of(f"ml/{name}", "workload.running")
        assert not running.running.pods_ready  # Running is not Ready
        evicted = await condition_when(stack.kubectl, "Workload", name, "ml", "Evicted", "True")
        assert evicted["reason"] == "PodsReadyTimeout"
        await job_when(stack.kubectl, "ml", "train", suspended=True)
        workload = await stack.kubectl.get("Workload", name, "ml")
        assert said(condition(workload, "PodsReady")) == WAITING
        assert not await stack.events.told(f"ml/{name}", "workload.pods_ready")


BACKOFF_S = 6


async def test_a_pods_ready_timeout_backs_off_requeued_false_then_true_then_deactivates(
    tmp_path: Path,
) -> None:
    """Kueue's conditions through waitForPodsReady's back-off: Requeued False while it backs
    off, True BackoffFinished when the back-off ends; past backoffLimitCount, deactivated."""
    # The back-off must outlast the pods: Requeued False is written once they are gone, and a
    # back-off already over by then requeues at once (no False to see). requeueAt is rounded
    # down to the second, so a 1 s back-off ended 0-1 s after the eviction, while the pods took
    # 0.04-4.2 s to go at load 25-30 (3 runs in 6 failed): 6 s leaves 5 s.
    requeuing = f"{{backoffBaseSeconds: {BACKOFF_S}, backoffLimitCount: 1}}"
    async with running_stack(
        tmp_path, kueue_config=pods_ready_config("1s", requeuing=requeuing)
    ) as stack:
        kubectl = stack.kubectl
        name, pods = await running_unready(stack)
        await stopped(stack, pods)
        timeout = f"Exceeded the PodsReady timeout ml/{name}"
        backing_off = await condition_when(kubectl, "Workload", name, "ml", "Requeued", "False")
        assert said(backing_off) == ("False", "PodsReadyTimeout", timeout)
        # Kueue's requeueState: one requeue, the back-off ending BACKOFF_S after the eviction,
        # in whole seconds: the instant admission requeues it at, not before.
        (evicted,) = await stack.events.told(f"ml/{name}", "workload.evicted")
        end_s = requeue_end_s(evicted.time_unix_nano / 1e9, BACKOFF_S)
        backing = (await status_of(kubectl, name)).get("requeueState")
        assert backing in ({"count": 1, "requeueAt": format_time(end_s)}, {"count": 1})
        requeued = await condition_when(kubectl, "Workload", name, "ml", "Requeued", "True")
        assert said(requeued) == ("True", "BackoffFinished", "The workload backoff was finished")
        (queued,) = await stack.events.told(f"ml/{name}", "workload.requeued")
        assert queued.time_unix_nano / 1e9 >= end_s
        status = await status_of(kubectl, name)
        assert status["requeueState"] == {"count": 1}  # requeueAt cleared as it queues again

        await stopped(stack, await start_unready(stack, name))  # times out again: the limit

        async def deactivated() -> dict[str, Any] | None:
            """Deactivated, and its pods gone: Evicted says why at once, Requeued and the
            reservation change only once its pods are gone (Kueue's job reconciler)."""
            workload = await kubectl.get("Workload", name, "ml")
            found = condition(workload, "Evicted")
            gone = condition(workload, "QuotaReserved").get("status") == "False"
            return workload if found.get("reason", "").startswith("Deactivated") and gone else None

        workload = await eventually(deactivated)
        limit = (
            "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
        )
        reason = "DeactivatedDueToRequeuingLimitExceeded"
        assert said(condition(workload, "Evicted")) == ("True", reason, limit)
        assert said(condition(workload, "Requeued")) == ("False", reason, limit)
        assert said(condition(workload, "QuotaReserved")) == (
            "False",
            "Deactivated",
            "The workload is deactivated",
        )
        assert said(condition(workload, "Admitted"))[:2] == ("False", "NoReservation")
        assert said(condition(workload, "PodsReady")) == WAITING
        assert "admission" not in workload["status"]
        assert "requeueState" not in workload["status"]  # Kueue clears it on deactivation


async def test_pods_that_become_ready_make_the_workload_pods_ready(tmp_path: Path) -> None:
    async with running_stack(tmp_path, kueue_config=pods_ready_config("10m")) as stack:
        kubectl = stack.kubectl
        name, pods = await running_unready(stack)
        waiting = await condition_when(kubectl, "Workload", name, "ml", "PodsReady", "False")
        assert said(waiting) == WAITING
        await kubectl.set_pod_phase("ml", pods[0], "Running")
        await kubectl.set_pod_phase("ml", pods[1], "Succeeded")  # a finished pod counts
        ready = await condition_when(kubectl, "Workload", name, "ml", "PodsReady", "True")
        assert said(ready) == (
            "True",
            "Started",
            "All pods reached readiness and the workload is running",
        )
        assert len(await stack.events.told(f"ml/{name}", "workload.pods_ready")) == 1
        assert condition(await kubectl.get("Workload", name, "ml"), "Evicted") == {}


async def running_ready_then_one_lost(stack: Stack) -> tuple[str, list[str]]:
    """Job `train` running with every pod Ready (PodsReady True), then its first pod's
    readiness probe failing: its Workload's name and its pods."""
    kubectl = stack.kubectl
    name, pods = await running_unready(stack)
    for pod in pods:
        await kubectl.set_pod_phase("ml", pod, "Running")
    await condition_when(kubectl, "Workload", name, "ml", "PodsReady", "True")
    await kubectl.set_pod_phase("ml", pods[0], "Running", ready=False)
    return name, pods


RECOVERING = ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery")


async def test_readiness_lost_past_the_recovery_timeout_evicts_the_job(tmp_path: Path) -> None:
    config = pods_ready_config("10m", recovery="1s")
    async with running_stack(tmp_path, kueue_config=config) as stack:
        name, _ = await running_ready_then_one_lost(stack)
        evicted = await condition_when(stack.kubectl, "Workload", name, "ml", "Evicted", "True")
        assert (evicted["reason"], evicted["message"]) == (
            "PodsReadyTimeout",
            f"Exceeded the PodsReady timeout ml/{name}",
        )
        await job_when(stack.kubectl, "ml", "train", suspended=True)
        told = await stack.events.told(f"ml/{name}", "workload.pods_ready")
        assert [e.pods_ready.lost for e in told] == [False, True]  # ready, then the loss


async def test_readiness_regained_in_time_reads_recovered_and_stays_admitted(
    tmp_path: Path,
) -> None:
    config = pods_ready_config("10m", recovery="10m")
    async with running_stack(tmp_path, kueue_config=config) as stack:
        kubectl = stack.kubectl
        name, pods = await running_ready_then_one_lost(stack)
        lost = await condition_when(kubectl, "Workload", name, "ml", "PodsReady", "False")
        assert said(lost) == RECOVERING
        await kubectl.set_pod_phase("ml", pods[0], "Running")
        back = await condition_when(kubectl, "Workload", name, "ml", "PodsReady", "True")
        assert said(back) == (
            "True",
            "Recovered",
            "All pods reached readiness and the workload is running",
        )
        told = await stack.events.told(f"ml/{name}", "workload.pods_ready")
        assert [e.pods_ready.lost for e in told] == [False, True, False]
        workload = await kubectl.get("Workload", name, "ml")
        assert condition(workload, "Evicted") == {}
        assert condition(workload, "Admitted")["status"] == "True"
