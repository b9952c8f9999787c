"""The simulated cluster's RuntimeClass admission: Pods naming a RuntimeClass get its overhead and
its scheduling (nodeSelector, tolerations) as on Kubernetes, so gang placement counts the one
and follows the other; one naming a RuntimeClass that does not exist, or setting a nodeSelector
its RuntimeClass contradicts, is refused in Kubernetes' words. Submitted as YAML through the
gateway, with a real nats-server; the outcome read from the cluster and the events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from bus_helpers import EventLog
from placement_stack import Stack, node, placement_stack
from test_gang_api_services import WORKLOAD, group_yaml
from test_limit_range_sim_pods import gang_of_two_placed

from muster.bus import Bus
from muster.cluster import ClusterError

pytestmark = pytest.mark.timeout(60)

KATA = """apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata
overhead: {podFixed: {cpu: "1"}}
"""


# Kata runs only on the nodes labelled for it, which are tainted against every other pod.
SANDBOXED = """apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: sandboxed}
handler: kata
scheduling:
  nodeSelector: {runtime: kata}
  tolerations: [{key: runtime, operator: Equal, value: kata, effect: NoSchedule}]
"""
PLAIN = """apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: plain}
handler: runc
"""


def pod_yaml(name: str, runtime_class: str = "kata", *, more: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ns}}
spec:
  schedulerName: muster
  schedulingGroup: {{podGroupName: workers}}
  runtimeClassName: {runtime_class}
  containers: [{{name: main, resources: {{requests: {{cpu: "2"}}}}}}]{more}
"""


def kata_node(name: str) -> dict[str, Any]:
    """A 4-cpu node labelled for kata and tainted so that only kata's pods run there."""
    kata = node(name, cpu="4", labels={"runtime": "kata"})
    kata["spec"] = {"taints": [{"key": "runtime", "value": "kata", "effect": "NoSchedule"}]}
    return kata


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events, gateway=True) as s:
        yield s


async def test_pods_get_their_runtime_class_overhead_and_are_placed_by_it(stack: Stack) -> None:
    """Two pods of 2 cpu and 1 cpu overhead on nodes of 4: one per node (without the overhead
    both would fit on one)."""
    pods = [pod_yaml("w-0"), pod_yaml("w-1")]
    assert await gang_of_two_placed(stack, KATA, pods) == [("w-0", 3000), ("w-1", 3000)]


async def test_a_pod_naming_a_missing_runtime_class_is_refused_in_kubernetes_words(
    stack: Stack,
) -> None:
    with pytest.raises(ClusterError) as refused:
        await stack.backend.create(yaml.safe_load(pod_yaml("p", runtime_class="gvisor")))
    assert refused.value.reason == "Forbidden"
    assert refused.value.message == (
        'pods "p" is forbidden: pod rejected: RuntimeClass "gvisor" not found'
    )
    assert await stack.backend.list_pods() == []


async def test_a_pod_is_placed_by_its_runtime_class_scheduling(stack: Stack) -> None:
    """Node big (8 cpu) has more room, but the pod naming "sandboxed" gets its nodeSelector
    (so not big) and its toleration (so the tainted kata node takes it)."""
    await stack.backend.apply(node("big", cpu="8"))
    await stack.backend.apply(kata_node("kata-1"))
    await stack.apply_all(SANDBOXED)
    group = group_yaml("workers", min_count=1)
    await stack.submit("---\n".join([WORKLOAD, group, pod_yaml("w-0", "sandboxed")]))

    (placed,) = await stack.wait_for_pods(
        "ns/workers", lambda ps: len(ps) == 1 and all(p.node_name for p in ps)
    )
    assert placed.node_name == "kata-1"
    stored = await stack.backend.store.get("pod.ns.w-0")
    assert stored is not None
    spec = stored.obj["spec"]
    assert spec["nodeSelector"] == {"runtime": "kata"}
    assert spec["tolerations"] == [
        {"key": "runtime", "operator": "Equal", "value": "kata", "effect": "NoSchedule"}
    ]


async def test_a_pod_of_a_runtime_class_with_no_scheduling_stays_off_the_tainted_node(
    stack: Stack,
) -> None:
    """The same pod naming "plain" (no scheduling) where only the kata node has room: it
    waits, unplaced, as on Kubernetes."""
    await stack.backend.apply(node("small", cpu="1"))
    await stack.backend.apply(kata_node("kata-1"))
    await stack.apply_all(PLAIN)
    group = group_yaml("workers", min_count=1)
    await stack.submit("---\n".join([WORKLOAD, group, pod_yaml("w-0", "plain")]))

    waiting = await stack.events.wait_for("gang_waiting", workload="ns/workers", timeout_s=10)
    assert waiting is not None
    (pod,) = await stack.pods_of("ns/workers")
    assert pod.node_name == ""


async def test_a_pod_contradicting_its_runtime_class_selector_is_refused_in_kubernetes_words(
    stack: Stack,
) -> None:
    await stack.apply_all(SANDBOXED)
    contradicting = pod_yaml("p", "sandboxed", more="\n  nodeSelector: {runtime: runc}")
    with pytest.raises(ClusterError) as refused:
        await stack.backend.create(yaml.safe_load(contradicting))
    assert refused.value.reason == "Forbidden"
    assert refused.value.message == (
        'pods "p" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[runtime] = kata; '
        "pod.spec.nodeSelector[runtime] = runc"
    )
    assert await stack.backend.list_pods() == []
