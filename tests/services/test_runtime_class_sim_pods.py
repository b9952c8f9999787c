"""The simulated cluster's RuntimeClass admission: Pods naming a RuntimeClass get its overhead as
on Kubernetes, so gang placement counts it on their node; one naming a RuntimeClass that does
not exist is refused in Kubernetes' words. Submitted as YAML through the gateway, with a real
nats-server; the outcome read from the cluster and the events."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import yaml
from bus_helpers import EventLog
from placement_stack import Stack, placement_stack
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


def pod_yaml(name: str, runtime_class: str = "kata") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ns}}
spec:
  schedulerName: muster
  schedulingGroup: {{podGroupName: workers}}
  runtimeClassName: {runtime_class}
  containers: [{{name: main, resources: {{requests: {{cpu: "2"}}}}}}]
"""


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
