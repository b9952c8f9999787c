"""A RuntimeClass on Kubernetes, as Kueue charges it: a Job whose pod template names one is
charged its containers plus the RuntimeClass's overhead per pod, and one naming a RuntimeClass
that does not exist is held Misconfigured naming the field (its pods would be refused).
Applied as an operator applies them, every service from its own flags against the API-server
stand-in; its RuntimeClass admission gives the Job's pods the same overhead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import (
    condition,
    eventually,
    job_when,
    object_when,
    running_stack,
    workload_of_job,
)
from test_kube_checks_e2e import queued_job, queues
from test_kube_services_e2e import NODE

pytestmark = pytest.mark.timeout(90)

KATA = """
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata
overhead: {podFixed: {cpu: "2"}}
"""


def job(name: str, runtime_class: str) -> str:
    """Two pods of 1 cpu naming `runtime_class`."""
    plain = queued_job(name, parallelism=2, resources='{requests: {cpu: "1"}}')
    return plain.replace(
        "      restartPolicy: Never\n",
        f"      restartPolicy: Never\n      runtimeClassName: {runtime_class}\n",
    )


async def test_a_jobs_workload_is_charged_its_runtime_class_overhead(tmp_path: Path) -> None:
    async with running_stack(tmp_path) as stack:
        kubectl = stack.kubectl
        await kubectl.apply("---".join((queues(None), NODE, KATA)))
        await kubectl.apply(job("kata", "kata") + "---" + job("gvisor", "gvisor"))
        charged = (await workload_of_job(kubectl, "ml", "kata"))["metadata"]["name"]
        missing = (await workload_of_job(kubectl, "ml", "gvisor"))["metadata"]["name"]

        started = await job_when(kubectl, "ml", "kata", suspended=False)
        # The binder starts the Job; the watcher writes the Workload's status apart from it.
        wl = await object_when(kubectl, "Workload", charged, "ml", "Admitted", "True")
        (assignment,) = wl["status"]["admission"]["podSetAssignments"]
        assert assignment["resourceUsage"] == {"cpu": "6"}  # 2 pods of 1 cpu + 2 overhead
        pods = await kubectl.run_job_pods(started)
        assert pods
        for pod in await kubectl.list_pods("ml"):
            assert pod["spec"]["overhead"] == {"cpu": "2"}  # the API server's admission

        async def held() -> dict[str, Any] | None:
            wl = await kubectl.get("Workload", missing, "ml")
            return wl if condition(wl, "QuotaReserved").get("reason") == "Misconfigured" else None

        refused = await eventually(held)
        assert condition(refused, "QuotaReserved")["message"] == (
            "pod overhead validation failed: spec.podSets[0].template.spec.runtimeClassName: "
            'RuntimeClass "gvisor" not found'
        )
