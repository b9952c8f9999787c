"""Kubernetes Events on the kube path, end to end: a low-priority Job admitted and placed, then
preempted by a high-priority one whose pods wait for room, as an operator would see it with
`kubectl describe` (core/v1 Events selected by the object's kind and name, through the
official client; muster writes them as events.k8s.io/v1, which the API server serves as
both): each
Workload's and Job's story (QuotaReserved, Admitted, Preempted, EvictedDueToPreempted,
Requeued, Pending) and its pods' placement (FailedScheduling with the gang's reason, then
Scheduled), each Event naming its object by uid. The API server fails some Event writes and
cuts every watch meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import (
    Kubectl,
    eventually,
    job_when,
    pods_bound,
    running_stack,
    workload_of_job,
)
from test_kube_services_e2e import EVICTION, NODE, job_yaml

pytestmark = pytest.mark.timeout(90)

# Bound by kube-scheduler, taking 10 of node-1's 16 cpu: low's pods (4 cpu) fit beside it,
# high's (4 more) only once low's are gone.
BIG_POD = """
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: default}
spec:
  nodeName: node-1
  containers: [{name: c, image: nginx:1.27, resources: {requests: {cpu: "10"}}}]
"""


async def events_of(kubectl: Kubectl, kind: str, name: str) -> list[Any]:
    """The Events about object `kind`/`name` in ml, oldest first, as `kubectl describe`
    selects them."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    listed = await asyncio.to_thread(
        kubectl.core.list_namespaced_event, "ml", field_selector=selector
    )
    return sorted(listed.items, key=lambda e: e.event_time)


async def reasons_when(kubectl: Kubectl, kind: str, name: str, *wanted: str) -> list[Any]:
    """The Events about the object once their reasons include `wanted`, in that order."""

    async def told() -> list[Any] | None:
        found = await events_of(kubectl, kind, name)
        reasons = iter(e.reason for e in found)
        return found if all(w in reasons for w in wanted) else None

    return await eventually(told)


async def test_kubectl_get_events_tells_a_preempted_workloads_story(tmp_path: Path) -> None:
    async with running_stack(tmp_path) as stack:
        server, kubectl = stack.server, stack.kubectl
        server.faults.fail_next(2, status=500, verb="create", path=r"events\.k8s\.io/.*/events$")
        await kubectl.apply(EVICTION + "---" + NODE + "---" + BIG_POD)
        await kubectl.set_pod_phase("default", "big", "Running")
        await kubectl.apply(job_yaml("low", priority="low"))
        low = await job_when(kubectl, "ml", "low", suspended=False)
        low_wl = await workload_of_job(kubectl, "ml", "low")
        low_pods = await kubectl.run_job_pods(low)
        await pods_bound(kubectl, "ml", low_pods)
        assert server.drop_watches() > 0  # cut, and resumed through 410 Gone
        server.compact()

        await kubectl.apply(job_yaml("high", priority="high"))
        await job_when(kubectl, "ml", "low", suspended=True)
        high = await job_when(kubectl, "ml", "high", suspended=False)
        high_pods = await kubectl.run_job_pods(high)
        (waiting, *_) = await reasons_when(kubectl, "Pod", high_pods[0], "FailedScheduling")
        assert waiting.type == "Warning"
        assert waiting.reporting_component == "muster"
        for name in low_pods:  # the Job controller removes a suspended Job's pods
            await kubectl.delete_pod("ml", name)
        await pods_bound(kubectl, "ml", high_pods)

        story = ("QuotaReserved", "Admitted", "Preempted", "EvictedDueToPreempted", "Requeued")
        workload = await reasons_when(kubectl, "Workload", low_wl["metadata"]["name"], *story)
        assert {e.involved_object.uid for e in workload} == {low_wl["metadata"]["uid"]}
        assert {e.reporting_component for e in workload} == {"muster.dev/admission"}
        reserved = next(e for e in workload if e.reason == "QuotaReserved")
        assert reserved.message.startswith("Quota reserved in ClusterQueue cq, wait time since")
        job = await reasons_when(kubectl, "Job", "low", *story)
        assert {e.involved_object.uid for e in job} == {low["metadata"]["uid"]}
        pending = await reasons_when(kubectl, "Workload", low_wl["metadata"]["name"], "Pending")
        assert next(e for e in pending if e.reason == "Pending").type == "Warning"
        placed = await reasons_when(kubectl, "Pod", high_pods[0], "FailedScheduling", "Scheduled")
        scheduled = next(e for e in placed if e.reason == "Scheduled")
        assert scheduled.message == f"Successfully assigned ml/{high_pods[0]} to node-1"
        assert scheduled.involved_object.uid  # kubectl describe pod selects by it too
        told = await reasons_when(kubectl, "Pod", low_pods[0], "Scheduled")
        # One Event per fact, whatever the retries and resumed watches. (A FailedScheduling
        # may come first: the Job controller's pods arrive one at a time, and a gang of two
        # waits for its second.)
        assert len([e for e in told if e.reason == "Scheduled"]) == 1
