"""Today's gang API on Kubernetes, end to end: every service on a real nats-server, watcher,
gangpermit and binder with `--cluster-backend kube` against the API-server stand-in serving
the scheduling.k8s.io API of a given Kubernetes release (or none), driven with the official
client as a user would (`kubectl apply` of `k8s/examples`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_services_helpers import Stack, eventually, running_stack

from muster.devtools.apiserver import default_resources

pytestmark = pytest.mark.timeout(60)

EXAMPLES = Path(__file__).resolve().parents[2] / "k8s" / "examples"
NODES = """
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {kubernetes.io/hostname: node-1}}
status:
  capacity: {cpu: "3", memory: 64Gi, ephemeral-storage: 200Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"""
MORE = NODES.replace("node-1", "node-2")
TEAM = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n"


async def bound_pods(stack: Stack, namespace: str, prefix: str) -> list[dict[str, Any]]:
    listed = await stack.kubectl.list_pods(namespace)
    return [p for p in listed if p["metadata"]["name"].startswith(prefix)]


async def test_v1beta1_gang_is_placed_whole_and_its_pod_group_says_so(tmp_path: Path) -> None:
    """The v1beta1 example's gang of 4 waits on a 3-cpu node, saying why on its PodGroup,
    then binds whole once a second node comes; PodGroupInitiallyScheduled turns True."""
    options = {"resources": default_resources("1.37")}
    async with running_stack(tmp_path, server=options) as stack:
        await stack.kubectl.apply(NODES)
        await stack.kubectl.apply(TEAM)
        await stack.kubectl.apply((EXAMPLES / "gang-v1beta1.yaml").read_text())

        async def waiting() -> str:
            group = await stack.kubectl.scheduling_object("podgroups", "ring-workers", "team-a")
            conditions = (group.get("status") or {}).get("conditions") or []
            message = next((c["message"] for c in conditions if c["status"] == "False"), "")
            return message if message.startswith("3 of 4 pods fit") else ""  # all 4 pods seen

        assert "Insufficient cpu" in await eventually(waiting)
        assert all(not p["spec"].get("nodeName") for p in await bound_pods(stack, "team-a", "ring"))

        await stack.kubectl.apply(MORE)

        async def scheduled() -> dict[str, Any] | None:
            group = await stack.kubectl.scheduling_object("podgroups", "ring-workers", "team-a")
            conditions = (group.get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["status"] == "True"), None)

        condition = await eventually(scheduled)
        assert (condition["type"], condition["reason"]) == (
            "PodGroupInitiallyScheduled",
            "Scheduled",
        )

        # The watcher writes the condition on the gang's permit; the binder binds its pods
        # apart from it, so they may be bound a moment later.
        async def bound() -> list[dict[str, Any]] | None:
            pods = await bound_pods(stack, "team-a", "ring")
            return pods if all(p["spec"].get("nodeName") for p in pods) else None

        assert len(await eventually(bound)) == 4
        stack.check_alive()


async def test_a_cluster_without_the_gang_api_still_runs_queued_jobs(tmp_path: Path) -> None:
    """scheduling.k8s.io serves only PriorityClasses (the gates are off by default): the
    two-team example's Jobs are admitted, and the Job controller's pods are bound."""
    options = {"resources": default_resources(None), "job_controller": True}
    async with running_stack(tmp_path, server=options) as stack:
        await stack.kubectl.apply(NODES.replace('cpu: "3"', 'cpu: "16"'))
        await stack.kubectl.apply((EXAMPLES / "two-teams.yaml").read_text())
        await stack.kubectl.apply((EXAMPLES / "jobs.yaml").read_text())

        async def running() -> list[str]:
            pods = await stack.kubectl.list_pods("team-a") + await stack.kubectl.list_pods("team-b")
            bound = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")]
            return bound if len(bound) == 6 else []

        assert len(await eventually(running)) == 6
        stack.check_alive()
