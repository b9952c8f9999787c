"""A namespace's LimitRange on Kubernetes, as Kueue applies it: a Job whose container sets no
request is charged the LimitRange's defaultRequest, and one over its max (which the API server
also makes the default limit) is held with the reason Misconfigured and a message naming the
container and the resource. Applied as an
operator applies them, every service from its own flags against the API-server stand-in.
The Job's pods get the same defaults from the API server's LimitRanger, so gang placement places
them by what admission charged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import (
    condition,
    eventually,
    job_when,
    object_when,
    pods_bound,
    running_stack,
    workload_of_job,
)
from test_kube_checks_e2e import queued_job, queues
from test_kube_services_e2e import NODE

pytestmark = pytest.mark.timeout(90)

LIMIT_RANGE = """
apiVersion: v1
kind: LimitRange
metadata: {name: sizes, namespace: ml}
spec:
  limits:
  - {type: Container, defaultRequest: {cpu: "4"}, max: {cpu: "8"}}
"""


def job(name: str, *, parallelism: int, resources: str = "{}") -> str:
    return queued_job(name, parallelism=parallelism, resources=resources)


async def test_a_jobs_workload_is_charged_and_bounded_by_its_namespaces_limit_range(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(queues(None) + "---" + NODE + "---" + LIMIT_RANGE)
        await kubectl.apply(
            job("plain", parallelism=3)
            + "---"
            + job("over", parallelism=1, resources='{requests: {cpu: "10"}}')
        )
        plain = (await workload_of_job(kubectl, "ml", "plain"))["metadata"]["name"]
        over = (await workload_of_job(kubectl, "ml", "over"))["metadata"]["name"]

        async def admitted() -> dict[str, Any] | None:
            wl = await kubectl.get("Workload", plain, "ml")
            return wl if ((wl or {}).get("status") or {}).get("admission") else None

        wl = await eventually(admitted)
        (assignment,) = wl["status"]["admission"]["podSetAssignments"]
        assert assignment["resourceUsage"] == {"cpu": "12"}  # 3 pods of the 4-cpu default

        async def held() -> dict[str, Any] | None:
            wl = await kubectl.get("Workload", over, "ml")
            return wl if condition(wl, "QuotaReserved").get("reason") == "Misconfigured" else None

        refused = await eventually(held)
        assert condition(refused, "QuotaReserved")["status"] == "False"
        assert condition(refused, "QuotaReserved")["message"] == (
            "resources validation failed: spec.podSets[0].template.spec.containers[0]: cpu "
            "request 10 exceeds its limit 8"  # the max is also the default limit, as stored
        )


SECOND_NODE = NODE.replace("node-1", "node-2")
# A default request alone: its pods ask 10 cpu each, more than half a node.
WIDE_LIMIT_RANGE = LIMIT_RANGE.replace("name: sizes", "name: wide").replace(
    '{type: Container, defaultRequest: {cpu: "4"}, max: {cpu: "8"}}',
    '{type: Container, defaultRequest: {cpu: "10"}}',
)


async def test_a_jobs_pods_request_the_default_and_are_placed_by_it(tmp_path: Path) -> None:
    """Two pods of 10 default cpu on nodes of 16: one per node, never both on one (their
    requests as written are none at all)."""
    async with running_stack(tmp_path) as stack:
        kubectl = stack.kubectl
        roomy = queues(None).replace('nominalQuota: "16"', 'nominalQuota: "32"')
        await kubectl.apply("---".join((roomy, NODE, SECOND_NODE, WIDE_LIMIT_RANGE)))
        await kubectl.apply(job("wide", parallelism=2))
        name = (await workload_of_job(kubectl, "ml", "wide"))["metadata"]["name"]
        started = await job_when(kubectl, "ml", "wide", suspended=False)
        # The binder starts the Job; the watcher writes the Workload's status apart from it.
        wl = await object_when(kubectl, "Workload", name, "ml", "Admitted", "True")
        (assignment,) = wl["status"]["admission"]["podSetAssignments"]
        assert assignment["resourceUsage"] == {"cpu": "20"}

        pods = await kubectl.run_job_pods(started)
        for pod in await kubectl.list_pods("ml"):
            (container,) = pod["spec"]["containers"]
            assert container["resources"] == {"requests": {"cpu": "10"}}
            assert pod["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
                "LimitRanger plugin set: cpu request for container main"
            )
        assert sorted(await pods_bound(kubectl, "ml", pods)) == ["node-1", "node-2"]
