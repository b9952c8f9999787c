"""A check's podSetUpdate that conflicts with the pods ends the workload as Kueue's job framework
ends it, end to end on Kubernetes: a queued Job applied as an operator applies it, the test as
the check's controller answering Ready with a nodeSelector the flavor already sets otherwise.
The Job never starts; its Workload is Finished with reason FailedToStart and a message naming
the check, the field, the key, both values and the podset; admission gives its quota back.
`muster simulate` decides the same from the same YAML (a scenario of tests/scenarios)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import condition, condition_when, running_stack, workload_of_job
from test_kube_checks_e2e import BUDGET, answer, check_when, job_yaml, queues
from test_kube_provisioning_e2e import autoscaler_says, request
from test_kube_services_e2e import NODE

from muster.cli.main import main

pytestmark = pytest.mark.timeout(90)

# The flavor puts pool=batch on the pods (its nodeLabels); the check asks for pool=gpu.
CLASHING = [{"name": "main", "nodeSelector": {"pool": "gpu"}}]
# The Job's pod template labels its pods team=ml; the check asks for team=infra.
LABELLED = job_yaml("clash").replace(
    "  template:\n    spec:", "  template:\n    metadata: {labels: {team: ml}}\n    spec:"
)


@pytest.mark.parametrize(
    ("job", "updates", "words"),
    [
        (job_yaml("clash"), CLASHING,
         "nodeSelector: conflict for key=pool, value1=batch, value2=gpu"),
        (LABELLED, [{"name": "main", "labels": {"team": "infra"}}],
         "labels: conflict for key=team, value1=ml, value2=infra"),
    ],
    ids=["nodeSelector over the flavor's", "label over the Job's template"],
)  # fmt: skip
async def test_a_checks_conflicting_update_finishes_the_workload_failed_to_start(
    tmp_path: Path, job: str, updates: list[dict[str, Any]], words: str
) -> None:
    async with running_stack(tmp_path) as stack:
        kubectl, events = stack.kubectl, stack.events
        await kubectl.apply(BUDGET + "---" + queues("budget") + "---" + NODE)
        await kubectl.apply(job)
        name = (await workload_of_job(kubectl, "ml", "clash"))["metadata"]["name"]
        await check_when(kubectl, name, state="Pending")

        await answer(kubectl, name, "Ready", "provisioned", podSetUpdates=updates)

        finished = await condition_when(kubectl, "Workload", name, "ml", "Finished", "True")
        assert finished["reason"] == "FailedToStart"
        assert finished["message"] == (
            'in admission check "budget": invalid admission check PodSetUpdate: conflict for '
            f'{words} (podset "main")'
        )
        assert (await kubectl.get("Job", "clash", "ml") or {})["spec"]["suspend"] is True
        (told,) = [e.finished for e in await events.told(f"ml/{name}", "workload.finished")]
        assert (told.succeeded, told.reason) == (False, "FailedToStart")


SCENARIO = (
    Path(__file__).parent.parent / "scenarios" / "checks" / "provisioning-conflicting-update.yaml"
)


def simulated_finish(scenario: Path, job: str) -> dict[str, Any]:
    """The Finished condition `muster simulate -o json` gives the Workload of Job `job`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", str(scenario), "-o", "json"]) == 0
    (wl,) = [
        w
        for w in json.loads(out.getvalue())["workloads"]
        if any(o["name"] == job for o in w["metadata"].get("ownerReferences", []))
    ]
    return condition(wl, "Finished")


async def test_the_services_end_it_as_muster_simulate_does(tmp_path: Path) -> None:
    """The scenario's YAML applied as it is; the test plays its scripted cluster-autoscaler."""
    simulated = simulated_finish(SCENARIO, "train")
    assert simulated["reason"] == "FailedToStart"
    async with running_stack(tmp_path) as stack:
        kubectl = stack.kubectl
        await kubectl.apply(SCENARIO.read_text())
        name = (await workload_of_job(kubectl, "team-a", "train"))["metadata"]["name"]
        await request(kubectl, f"{name}-prov-1", namespace="team-a")
        await autoscaler_says(kubectl, f"{name}-prov-1", "Provisioned", "up", namespace="team-a")

        finished = await condition_when(kubectl, "Workload", name, "team-a", "Finished", "True")
        assert {k: finished[k] for k in ("reason", "message")} == {
            k: simulated[k] for k in ("reason", "message")
        }
        assert (await kubectl.get("Job", "train", "team-a") or {})["spec"]["suspend"] is True
