"""A waiting Workload's `Admitted` condition on Kubernetes, as Kueue v0.19+ writes it by
default (UnadmittedWorkloadsObservability): False, NoReservation, beside QuotaReserved False
while it has no quota; False, UnsatisfiedAdmissionChecks, while it holds quota and its
admission checks are not all Ready; True once they are. Jobs applied as an operator applies
them, every service from its own flags against the API-server stand-in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import Kubectl, condition, eventually, running_stack, workload_of_job
from test_kube_checks_e2e import BUDGET, answer, check_when, job_yaml, queues
from test_kube_services_e2e import NODE

pytestmark = pytest.mark.timeout(90)


async def admitted_when(kubectl: Kubectl, name: str, *, reason: str) -> dict[str, Any]:
    """Workload ml/`name` once its Admitted condition has `reason`."""

    async def said() -> dict[str, Any] | None:
        wl = await kubectl.get("Workload", name, "ml")
        return wl if condition(wl, "Admitted").get("reason") == reason else None

    return await eventually(said)


async def test_a_waiting_workload_says_it_is_not_admitted_and_why(tmp_path: Path) -> None:
    async with running_stack(tmp_path) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(BUDGET + "---" + queues("budget") + "---" + NODE)
        # 17 cpu in a ClusterQueue of 16: it waits for quota; 1 cpu: reserved, check Pending.
        await kubectl.apply(job_yaml("big", parallelism=17) + "---" + job_yaml("checked"))
        big = (await workload_of_job(kubectl, "ml", "big"))["metadata"]["name"]
        checked = (await workload_of_job(kubectl, "ml", "checked"))["metadata"]["name"]

        waiting = await admitted_when(kubectl, big, reason="NoReservation")
        assert condition(waiting, "Admitted")["status"] == "False"
        assert condition(waiting, "Admitted")["message"] == "The workload has no reservation"
        assert condition(waiting, "QuotaReserved")["status"] == "False"

        await check_when(kubectl, checked, state="Pending")
        held = await admitted_when(kubectl, checked, reason="UnsatisfiedAdmissionChecks")
        assert condition(held, "Admitted")["status"] == "False"
        assert condition(held, "Admitted")["message"] == "The workload has not all checks ready"
        assert condition(held, "QuotaReserved")["status"] == "True"

        await answer(kubectl, checked, "Ready", "within budget")
        admitted = await admitted_when(kubectl, checked, reason="Admitted")
        assert condition(admitted, "Admitted")["status"] == "True"
