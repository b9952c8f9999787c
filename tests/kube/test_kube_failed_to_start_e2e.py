"""A check's podSetUpdate that conflicts with the pods ends the workload as Kueue's job framework
ends it, end to end on Kubernetes: a queued Job applied as an operator applies it, the test as
the check's controller answering Ready with a nodeSelector the flavor already sets otherwise.
The Job never starts; its Workload is Finished with reason FailedToStart and a message naming
the check, the field, the key, both values and the podset; admission gives its quota back."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_services_helpers import condition_when, running_stack, workload_of_job
from test_kube_checks_e2e import BUDGET, answer, check_when, job_yaml, queues
from test_kube_services_e2e import NODE

pytestmark = pytest.mark.timeout(90)

# The flavor puts pool=batch on the pods (its nodeLabels); the check asks for pool=gpu.
CLASHING = [{"name": "main", "nodeSelector": {"pool": "gpu"}}]


async def test_a_checks_conflicting_update_finishes_the_workload_failed_to_start(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path) as stack:
        kubectl, events = stack.kubectl, stack.events
        await kubectl.apply(BUDGET + "---" + queues("budget") + "---" + NODE)
        await kubectl.apply(job_yaml("clash"))
        name = (await workload_of_job(kubectl, "ml", "clash"))["metadata"]["name"]
        await check_when(kubectl, name, state="Pending")

        await answer(kubectl, name, "Ready", "provisioned", podSetUpdates=CLASHING)

        finished = await condition_when(kubectl, "Workload", name, "ml", "Finished", "True")
        assert finished["reason"] == "FailedToStart"
        assert finished["message"] == (
            'in admission check "budget": invalid admission check PodSetUpdate: conflict for '
            'nodeSelector: conflict for key=pool, value1=batch, value2=gpu (podset "main")'
        )
        assert (await kubectl.get("Job", "clash", "ml") or {})["spec"]["suspend"] is True
        (told,) = [e.finished for e in events.of(f"ml/{name}", "workload.finished")]
        assert (told.succeeded, told.reason) == (False, "FailedToStart")
