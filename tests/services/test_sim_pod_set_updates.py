"""A Ready admission check's podSetUpdates reach the simulated cluster's pods, as the kube
backend puts them on a Workload's pods (docs/kubernetes.md, "Admission checks" step 4): a
controller writes them into the Kueue Workload stored in the cluster, admission admits it
after its checks (not with its reservation), and the binder starts its pods with the labels,
annotations, nodeSelector and tolerations asked for, and the pods are placed by them (task
checkplace: before, pods placed before they existed were placed from the `admitted` alone).
Against a real nats-server, placed first (the simulated cluster's default) and created unbound
then bound."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from bus_helpers import EventLog
from placement_stack import Stack, node, placement_stack, workload_manifest

from muster.bus import Bus
from muster.contracts.v1 import events_pb2

pytestmark = pytest.mark.timeout(60)

CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
UPDATE: dict[str, Any] = {
    "name": "main",
    "labels": {"team": "ml"},
    "annotations": {CONSUME: "train-prov-1"},
    "nodeSelector": {"pool": "provisioned"},
    "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
}


@pytest.fixture(params=[True, False], ids=["placed-first", "created-unbound"])
async def stack(bus: Bus, events: EventLog, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events, placed_first=request.param) as s:
        yield s


def checked_workload(state: str) -> dict[str, Any]:
    """Workload ns/train of two pods, its check "prov" answered `state` with UPDATE."""
    manifest = workload_manifest("train", count=2, cpu="1", run_seconds="600")
    entry = {"name": "prov", "state": state, "message": "", "podSetUpdates": [UPDATE]}
    manifest["status"] = {"admissionChecks": [entry]}
    return manifest


async def admitted_after_checks(stack: Stack, manifest: dict[str, Any]) -> str:
    """Store `manifest` in the cluster (the watcher tells its `submitted`), then publish its
    `admitted` as admission does once its checks passed: no `with_reservation`."""
    await stack.backend.apply(manifest)
    key = "ns/train"
    await stack.events.wait_for("submitted", workload=key, timeout_s=10)
    assignment = events_pb2.PodSetAssignment(name="main", count=2, flavors={"cpu": "default"})
    admitted = events_pb2.WorkloadAdmitted(
        admission=events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment]),
        manifest_json=json.dumps(manifest),
        origin_cluster="local",
        with_reservation=False,
    )
    await stack.publish("admitted", admitted, workload=key)
    return key


async def pods_of_train(stack: Stack) -> list[dict[str, Any]]:
    await stack.wait_for_pods(
        "ns/train", lambda pods: len(pods) == 2 and all(p.node_name for p in pods)
    )
    stored = [await stack.backend.store.get(f"pod.ns.train-main-{i}") for i in range(2)]
    return [s.obj for s in stored if s is not None]


async def test_a_ready_checks_pod_set_updates_go_onto_the_simulated_pods(stack: Stack) -> None:
    await stack.backend.apply(node("n0", labels={"pool": "provisioned"}))
    await admitted_after_checks(stack, checked_workload("Ready"))
    pods = await pods_of_train(stack)
    assert len(pods) == 2
    for pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["labels"]["team"] == "ml"
        assert meta["labels"]["muster.dev/workload"] == "train"  # muster's own label kept
        assert meta["annotations"][CONSUME] == "train-prov-1"
        assert meta["annotations"]["muster.dev/run-seconds"] == "600"  # the template's kept
        assert spec["nodeSelector"] == {"pool": "provisioned"}
        assert spec["tolerations"] == [UPDATE["tolerations"][0]]


async def test_updates_of_a_check_not_ready_stay_off_the_pods(stack: Stack) -> None:
    """The same updates under a Pending answer (Kueue applies only Ready ones)."""
    await stack.backend.apply(node("n0", labels={"pool": "provisioned"}))
    await admitted_after_checks(stack, checked_workload("Pending"))
    for pod in await pods_of_train(stack):
        assert "team" not in pod["metadata"]["labels"]
        assert CONSUME not in pod["metadata"]["annotations"]
        assert "nodeSelector" not in pod["spec"]


def provisioned_node(name: str) -> dict[str, Any]:
    """A node labelled pool=provisioned and tainted spot:NoSchedule, as a ProvisioningRequest's
    new nodes are kept for the pods that consume it: only UPDATE lets the pods onto it."""
    obj = node(name, labels={"pool": "provisioned"})
    obj["spec"] = {"taints": [{"key": "spot", "value": "", "effect": "NoSchedule"}]}
    return obj


async def test_pods_go_to_the_node_only_the_checks_update_lets_them_onto(stack: Stack) -> None:
    await stack.backend.apply(node("plain"))
    await stack.backend.apply(provisioned_node("prov"))
    key = await admitted_after_checks(stack, checked_workload("Ready"))
    pods = await stack.wait_for_pods(key, lambda ps: len(ps) == 2 and all(p.node_name for p in ps))
    assert sorted(p.node_name for p in pods) == ["prov", "prov"]


async def test_pods_wait_where_no_node_has_the_label_the_update_selects(stack: Stack) -> None:
    await stack.backend.apply(node("plain", cpu="8"))
    key = await admitted_after_checks(stack, checked_workload("Ready"))
    waiting = await stack.events.wait_for("gang_waiting", workload=key, timeout_s=10)
    assert waiting.gang_waiting.min_count == 2
    assert not [p for p in await stack.pods_of(key) if p.node_name]


async def test_a_check_asking_for_another_value_of_a_set_node_label_fails_the_start(
    stack: Stack,
) -> None:
    """The template already selects pool=plain: Kueue takes the check's pool=provisioned for a
    conflict and fails the workload (FailedToStart) rather than choose; no pod is made."""
    await stack.backend.apply(node("plain", labels={"pool": "plain"}))
    await stack.backend.apply(provisioned_node("prov"))
    manifest = checked_workload("Ready")
    manifest["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {"pool": "plain"}
    key = await admitted_after_checks(stack, manifest)
    finished = await stack.events.wait_for("finished", workload=key, timeout_s=10)
    assert not finished.finished.succeeded
    assert finished.finished.reason == "FailedToStart"
    assert finished.finished.message == (
        'in admission check "prov": invalid admission check PodSetUpdate: conflict for '
        'nodeSelector: conflict for key=pool, value1=plain, value2=provisioned (podset "main")'
    )
    assert await stack.pods_of(key) == []
