"""JobSets on Kubernetes, as Kueue's JobSet integration runs them, against the API-server stand-in
with its Job and JobSet controllers: a queued JobSet gets its Kueue Workload (one podset per
replicatedJob), is admitted within quota and unsuspended with its flavor's node selector (its
child Jobs and their pods follow, placed on the flavor's nodes); a higher-priority JobSet
preempts it (suspended, its templates put back); the preemptor's end (JobSet Completed)
finishes its workload and gives the quota back to the one waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from jobset_queues import preempting_queue
from kube_helpers import as_json
from kube_services_helpers import Kubectl, condition, condition_when, eventually, running_stack
from kubernetes.client.exceptions import ApiException
from test_kube_submit_e2e import EXAMPLES, kube_gateway, muster

from muster.cluster.kube.settings import KubeConfig
from muster.gateway.auth_config import SecurityConfig

pytestmark = pytest.mark.timeout(120)

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
QUEUES = """
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {pool: b}}
status:
  capacity: {cpu: "8", memory: 16Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: node-2, labels: {pool: a}}
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "20"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
""" + preempting_queue("team-a")


def jobset(
    name: str,
    priority: str,
    replicated: dict[str, int],
    *,
    namespace: str = "team-a",
    queue: str = "lq",
    cpu: str = "1",
) -> dict[str, Any]:
    """A suspended JobSet with, per replicatedJob `rj` of `replicated`, one child Job of
    `replicated[rj]` pods (`cpu` each; completions as many); no priority label when
    `priority` is empty."""
    template = {
        "spec": {
            "schedulerName": "muster",
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
            ],
        }
    }
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": rj,
                    "replicas": 1,
                    "template": {
                        "spec": {"parallelism": n, "completions": n, "template": template}
                    },
                }
                for rj, n in replicated.items()
            ],
        },
    }


async def create(kubectl: Kubectl, obj: dict[str, Any], *, namespace: str = "team-a") -> None:
    await asyncio.to_thread(
        kubectl.custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, obj
    )


async def get_jobset(
    kubectl: Kubectl, name: str, *, namespace: str = "team-a"
) -> dict[str, Any] | None:
    def read() -> dict[str, Any] | None:
        try:
            found = kubectl.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return as_json(found)

    return await asyncio.to_thread(read)


async def workload_of(kubectl: Kubectl, name: str, *, namespace: str = "team-a") -> str:
    """The name of the Kueue Workload controlled by JobSet `name`, once it exists."""

    async def owned() -> str | None:
        for wl in await kubectl.workloads(namespace):
            for ref in wl["metadata"].get("ownerReferences") or []:
                if ref["kind"] == "JobSet" and ref["name"] == name and ref.get("controller"):
                    return str(wl["metadata"]["name"])
        return None

    return await eventually(owned)


async def suspended_when(kubectl: Kubectl, name: str, suspended: bool) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        js = await get_jobset(kubectl, name)
        return js if js is not None and js["spec"]["suspend"] is suspended else None

    return await eventually(check)


async def pods_of(kubectl: Kubectl, jobset_name: str, *, bound: int) -> list[dict[str, Any]]:
    """The pods of JobSet `jobset_name`'s child Jobs, once `bound` of them are bound."""

    async def found() -> list[dict[str, Any]] | None:
        pods = [
            p
            for p in await kubectl.list_pods("team-a")
            if p["metadata"]["name"].startswith(f"{jobset_name}-")
            and not p["metadata"].get("deletionTimestamp")
        ]
        done = [p for p in pods if p["spec"].get("nodeName")]
        return pods if len(done) == bound else None

    return await eventually(found)


def node_selectors(js: dict[str, Any]) -> list[Any]:
    return [
        rj["template"]["spec"]["template"]["spec"].get("nodeSelector")
        for rj in js["spec"]["replicatedJobs"]
    ]


async def test_jobsets_are_admitted_placed_preempted_and_finished(tmp_path: Path) -> None:
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(QUEUES)

        await create(kubectl, jobset("batch", "low", {"workers": 4}))
        batch = await workload_of(kubectl, "batch")
        await condition_when(kubectl, "Workload", batch, "team-a", "Admitted", "True")
        stored = await kubectl.get("Workload", batch, "team-a")
        assert stored is not None
        assert [(p["name"], p["count"]) for p in stored["spec"]["podSets"]] == [("workers", 4)]
        started = await suspended_when(kubectl, "batch", False)
        assert node_selectors(started) == [{"pool": "a"}]
        running = await pods_of(kubectl, "batch", bound=4)
        assert {p["spec"]["nodeName"] for p in running} == {"node-2"}  # the flavor's nodes

        await create(kubectl, jobset("urgent", "high", {"leader": 1, "workers": 2}))
        urgent = await workload_of(kubectl, "urgent")
        evicted = await condition_when(kubectl, "Workload", batch, "team-a", "Evicted", "True")
        assert evicted["reason"] == "Preempted"
        urgent_uid = ((await get_jobset(kubectl, "urgent")) or {})["metadata"]["uid"]
        assert f"JobUID: {urgent_uid})" in evicted["message"]
        stopped = await suspended_when(kubectl, "batch", True)
        assert node_selectors(stopped) == [None]  # its template as written
        await condition_when(kubectl, "Workload", urgent, "team-a", "Admitted", "True")
        await suspended_when(kubectl, "urgent", False)
        for pod in await pods_of(kubectl, "urgent", bound=3):
            await kubectl.set_pod_phase("team-a", pod["metadata"]["name"], "Succeeded")

        async def completed() -> dict[str, Any] | None:
            js = await get_jobset(kubectl, "urgent")
            return js if condition(js, "Completed").get("status") == "True" else None

        done = await eventually(completed)
        assert [(s["name"], s["succeeded"]) for s in done["status"]["replicatedJobsStatus"]] == [
            ("leader", 1),
            ("workers", 1),
        ]
        await condition_when(kubectl, "Workload", urgent, "team-a", "Finished", "True")
        readmitted = await condition_when(kubectl, "Workload", batch, "team-a", "Admitted", "True")
        assert readmitted["status"] == "True"
        again = await suspended_when(kubectl, "batch", False)
        assert node_selectors(again) == [{"pool": "a"}]

        async def told_on_the_jobset() -> set[str] | None:
            listed = await asyncio.to_thread(kubectl.core.list_namespaced_event, "team-a")
            reasons = {
                str(e.reason)
                for e in listed.items
                if e.involved_object.kind == "JobSet" and e.involved_object.name == "batch"
            }
            return reasons if {"Preempted", "Admitted"} <= reasons else None

        await eventually(told_on_the_jobset)  # as on its Workload (Kueue's job reconciler)


async def test_a_hostile_jobset_gets_no_workload_and_its_field_is_named(tmp_path: Path) -> None:
    hostile = jobset("bad", "low", {"workers": 1})
    hostile["spec"]["replicatedJobs"].append(dict(hostile["spec"]["replicatedJobs"][0]))
    good = jobset("good", "low", {"workers": 1})
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(QUEUES)

        await create(kubectl, hostile)
        await create(kubectl, good)
        admitted = await workload_of(kubectl, "good")  # the one after it is taken
        await condition_when(kubectl, "Workload", admitted, "team-a", "Admitted", "True")

        async def warned() -> tuple[str, str] | None:
            listed = await asyncio.to_thread(kubectl.core.list_namespaced_event, "team-a")
            return next(
                (
                    (str(e.reason), str(e.message))
                    for e in listed.items
                    if e.type == "Warning" and e.involved_object.name == "bad"
                ),
                None,
            )

        reason, message = await eventually(warned)
        assert reason == "ErrWorkloadCompose"
        assert message.startswith(
            'JobSet/team-a/bad: spec.replicatedJobs[1].name: duplicate replicatedJob name "workers"'
        )
        assert [wl["metadata"]["name"] for wl in await kubectl.workloads("team-a")] == [admitted]


async def test_muster_submit_creates_the_example_jobset_and_it_is_admitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_stack(tmp_path, server={"job_controller": True}) as stack:
        security = SecurityConfig(kube=KubeConfig(host=stack.server.url))
        async with kube_gateway(stack.bus, security) as address:
            for example in ("two-teams.yaml", "jobset.yaml"):
                assert await muster("submit", str(EXAMPLES / example), "--gateway", address) == 0
            # Submitted again (a retry, or by mistake): left as it is, never replaced.
            assert await muster("submit", str(EXAMPLES / "jobset.yaml"), "--gateway", address) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "JobSet team-a/sample-jobset created" in lines
        assert lines[-1].startswith("JobSet team-a/sample-jobset exists")

        workload = await workload_of(stack.kubectl, "sample-jobset")
        await condition_when(stack.kubectl, "Workload", workload, "team-a", "Admitted", "True")
        started = await suspended_when(stack.kubectl, "sample-jobset", False)
        assert [rj["name"] for rj in started["spec"]["replicatedJobs"]] == ["driver", "workers"]
        # Submitted by the watcher from the API server, never by the gateway on NATS alone.
        await stack.events.caught_up()
        sources = {e.source for e in stack.events.seen if e.type == "workload.submitted"}
        assert sources == {"watcher/local"}
