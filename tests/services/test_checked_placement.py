"""A Ready admission check's podSetUpdates steer where the pods are placed, as kube-scheduler
places the pods Kueue started with them (Kueue's job framework merges them into the pod
template at start). The pair: a node only the update lets the pods onto (its taint tolerated,
its label selected), and a node the update keeps them off (it lacks the selected label), where
the gang waits. Against a real nats-server, placed first (the simulated cluster's default) and
created unbound then bound."""

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

KEY = "ns/train"
UPDATE: dict[str, Any] = {
    "name": "main",
    "nodeSelector": {"pool": "provisioned"},
    "tolerations": [{"key": "provisioned", "operator": "Exists", "effect": "NoSchedule"}],
}


@pytest.fixture(params=[True, False], ids=["placed-first", "created-unbound"])
async def stack(bus: Bus, events: EventLog, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events, placed_first=request.param) as s:
        yield s


def provisioned_node(name: str) -> dict[str, Any]:
    """A node labelled pool=provisioned and tainted so that only pods tolerating it go there,
    as a ProvisioningRequest's new nodes are."""
    obj = node(name, labels={"pool": "provisioned"})
    obj["spec"] = {"taints": [{"key": "provisioned", "value": "", "effect": "NoSchedule"}]}
    return obj


async def admit_checked(stack: Stack) -> None:
    """Workload ns/train (two pods of 1 cpu) whose check "prov" answered Ready with UPDATE,
    stored in the cluster, then admitted as admission does once its checks passed."""
    manifest = workload_manifest("train", count=2, cpu="1", run_seconds="600")
    entry = {"name": "prov", "state": "Ready", "message": "", "podSetUpdates": [UPDATE]}
    manifest["status"] = {"admissionChecks": [entry]}
    await stack.backend.apply(manifest)
    await stack.events.wait_for("submitted", workload=KEY, timeout_s=10)
    assignment = events_pb2.PodSetAssignment(name="main", count=2, flavors={"cpu": "default"})
    admitted = events_pb2.WorkloadAdmitted(
        admission=events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment]),
        manifest_json=json.dumps(manifest),
        origin_cluster="local",
        with_reservation=False,
    )
    await stack.publish("admitted", admitted, workload=KEY)


async def test_pods_go_to_the_node_only_the_checks_update_lets_them_onto(stack: Stack) -> None:
    await stack.backend.apply(node("plain"))
    await stack.backend.apply(provisioned_node("prov"))
    await admit_checked(stack)
    pods = await stack.wait_for_pods(KEY, lambda ps: len(ps) == 2 and all(p.node_name for p in ps))
    assert sorted(p.node_name for p in pods) == ["prov", "prov"]


async def test_pods_wait_where_no_node_has_the_label_the_update_selects(stack: Stack) -> None:
    await stack.backend.apply(node("plain", cpu="8"))
    await admit_checked(stack)
    waiting = await stack.events.wait_for("gang_waiting", workload=KEY, timeout_s=10)
    assert waiting.gang_waiting.min_count == 2
    assert not [p for p in await stack.pods_of(KEY) if p.node_name]
