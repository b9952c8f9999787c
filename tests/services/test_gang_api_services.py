"""Today's Kubernetes gang API through the services: Submit → cluster → gangpermit → binder →
kubelet, with a real nats-server.

A v1beta1 Workload, PodGroup and Pods (and a v1alpha3 CompositePodGroup tree) are submitted as
YAML, as a user writes them; the outcome is read from the events on the bus and the pods in the
cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from bus_helpers import EventLog
from placement_stack import Stack, node, placement_stack

from muster.bus import Bus
from muster.gateway.eventtext import detail

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events, gateway=True) as s:
        yield s


def group_yaml(name: str, *, min_count: int, parent: str = "", extra: str = "") -> str:
    ref = f"  parentCompositePodGroupName: {parent}\n" if parent else ""
    ref += f"  workloadRef: {{workloadName: train, templateName: {name}}}\n"
    return f"""apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {{name: {name}, namespace: ns}}
spec:
{ref}  schedulingPolicy: {{gang: {{minCount: {min_count}}}}}
{extra}"""


def pods_yaml(group: str, count: int, *, cpu: str = "1") -> list[str]:
    return [
        f"""apiVersion: v1
kind: Pod
metadata: {{name: {group}-{i}, namespace: ns}}
spec:
  schedulerName: muster
  schedulingGroup: {{podGroupName: {group}}}
  containers: [{{name: main, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"""
        for i in range(count)
    ]


WORKLOAD = """apiVersion: scheduling.k8s.io/v1beta1
kind: Workload
metadata: {name: train, namespace: ns}
spec:
  podGroupTemplates:
  - {name: workers, schedulingPolicy: {gang: {minCount: 3}}}
"""


async def test_v1beta1_gang_waits_for_room_then_binds_whole(stack: Stack) -> None:
    await stack.backend.apply(node("a", cpu="2"))
    reply = await stack.submit(
        "---\n".join([WORKLOAD, group_yaml("workers", min_count=3), *pods_yaml("workers", 3)])
    )
    assert [(o.kind, o.key) for o in reply.objects] == [
        ("Workload.scheduling.k8s.io", "ns/train"),
        ("PodGroup.scheduling.k8s.io", "ns/workers"),
        *(("Pod", f"ns/workers-{i}") for i in range(3)),
    ]
    waiting = await stack.events.wait_for("gang_waiting", workload="ns/workers", timeout_s=10)
    while waiting.gang_waiting.pending < 3:  # the binder applies the pods one by one
        waiting = await stack.events.wait_for_next("gang_waiting", after=waiting, timeout_s=10)
    assert waiting.gang_waiting.reason.startswith("2 of 3 pods fit")
    assert stack.events.matching("gang_permitted", workload="ns/workers") == []

    await stack.backend.apply(node("b", cpu="1"))
    permitted = await stack.events.wait_for("gang_permitted", workload="ns/workers", timeout_s=10)
    assert sorted(b.node for b in permitted.gang_permitted.bindings) == ["a", "a", "b"]
    await stack.events.wait_for("bound", workload="ns/workers", timeout_s=10)
    await stack.wait_for_pods(
        "ns/workers", lambda pods: len(pods) == 3 and all(p.node_name for p in pods)
    )


COMPOSITE = """apiVersion: scheduling.k8s.io/v1alpha3
kind: CompositePodGroup
metadata: {name: root, namespace: ns}
spec:
  workloadRef: {workloadName: train, templateName: root}
  schedulingPolicy: {gang: {minGroupCount: 2}}
  schedulingConstraints: {topology: [{key: block}]}
"""


async def test_composite_tree_binds_both_groups_in_one_block_or_nothing(stack: Stack) -> None:
    await stack.backend.apply(node("a1", cpu="2", labels={"block": "a"}))
    await stack.backend.apply(node("b1", cpu="2", labels={"block": "b"}))
    manifest = "---\n".join(
        [
            COMPOSITE,
            group_yaml("left", min_count=2, parent="root"),
            group_yaml("right", min_count=2, parent="root"),
            *pods_yaml("left", 2),
            *pods_yaml("right", 2),
        ]
    )
    await stack.submit(manifest)
    # Each block takes one group, not both: the tree waits, holding nothing.
    waiting = await stack.events.wait_for("gang_waiting", workload="ns/root", timeout_s=10)
    while "no block domain" not in waiting.gang_waiting.reason:
        waiting = await stack.events.wait_for_next("gang_waiting", after=waiting, timeout_s=10)
    assert stack.events.matching("gang_permitted") == []
    # The tree needs two groups of 2 pods: 4 pods, not its group count ("4 of 2 pods pending").
    assert waiting.gang_waiting.min_count == 4
    assert detail(waiting).endswith(f"({waiting.gang_waiting.pending} of 4 pods pending)")

    await stack.backend.apply(node("b2", cpu="2", labels={"block": "b"}))
    left = await stack.events.wait_for("gang_permitted", workload="ns/left", timeout_s=10)
    right = await stack.events.wait_for("gang_permitted", workload="ns/right", timeout_s=10)
    nodes = {b.node for e in (left, right) for b in e.gang_permitted.bindings}
    assert nodes == {"b1", "b2"}
    await stack.events.wait_for("bound", workload="ns/right", timeout_s=10)
