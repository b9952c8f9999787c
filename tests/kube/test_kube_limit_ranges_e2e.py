"""A namespace's LimitRange on Kubernetes, as Kueue applies it: a Job whose container sets no
request is charged the LimitRange's defaultRequest, and one over its max (which the API server
also makes the default limit) is held with the reason Misconfigured and a message naming the
container and the resource. Applied as an
operator applies them, every service from its own flags against the API-server stand-in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import condition, eventually, running_stack, workload_of_job
from test_kube_checks_e2e import queues
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
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: ml
  labels: {{kueue.x-k8s.io/queue-name: lq}}
spec:
  suspend: true
  parallelism: {parallelism}
  template:
    spec:
      schedulerName: muster
      restartPolicy: Never
      containers:
      - {{name: main, image: busybox:1.36, resources: {resources}}}
"""


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

        wl = await eventually(admitted, timeout_s=30.0)
        (assignment,) = wl["status"]["admission"]["podSetAssignments"]
        assert assignment["resourceUsage"] == {"cpu": "12"}  # 3 pods of the 4-cpu default

        async def held() -> dict[str, Any] | None:
            wl = await kubectl.get("Workload", over, "ml")
            return wl if condition(wl, "QuotaReserved").get("reason") == "Misconfigured" else None

        refused = await eventually(held, timeout_s=30.0)
        assert condition(refused, "QuotaReserved")["status"] == "False"
        assert condition(refused, "QuotaReserved")["message"] == (
            "resources validation failed: spec.podSets[0].template.spec.containers[0]: cpu "
            "request 10 exceeds its limit 8"  # the max is also the default limit, as stored
        )
