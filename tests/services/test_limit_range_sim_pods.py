"""The simulated cluster's LimitRanger: Pods submitted into a namespace with a LimitRange get
its defaults as on Kubernetes, so gang placement places them by those; one outside its bounds
is refused in Kubernetes' words. Submitted as YAML through the gateway, with a real
nats-server; the outcome read from the cluster and the events."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import yaml
from bus_helpers import EventLog
from placement_stack import Stack, node, placement_stack
from test_gang_api_services import WORKLOAD, group_yaml

from muster.bus import Bus
from muster.cluster import ClusterError

pytestmark = pytest.mark.timeout(60)

LIMIT_RANGE = """apiVersion: v1
kind: LimitRange
metadata: {name: sizes, namespace: ns}
spec:
  limits:
  - {type: Container, defaultRequest: {cpu: "3"}, max: {cpu: "4"}}
"""


def pod_yaml(name: str, resources: str = "{}") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ns}}
spec:
  schedulerName: muster
  schedulingGroup: {{podGroupName: workers}}
  containers: [{{name: main, resources: {resources}}}]
"""


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events, gateway=True) as s:
        yield s


async def gang_of_two_placed(stack: Stack, setup: str, pods: list[str]) -> list[tuple[str, int]]:
    """Nodes a and b of 4 cpu, `setup` written into the cluster, then gang `workers` of the two
    `pods` submitted: each pod's cpu request as stored once both are bound, one per node."""
    await stack.backend.apply(node("a", cpu="4"))
    await stack.backend.apply(node("b", cpu="4"))
    await stack.apply_all(setup)
    group = group_yaml("workers", min_count=2)
    await stack.submit("---\n".join([WORKLOAD, group, *pods]))

    await stack.events.wait_for("gang_permitted", workload="ns/workers", timeout_s=10)
    placed = await stack.wait_for_pods("ns/workers", lambda ps: all(p.node_name for p in ps))
    assert sorted(p.node_name for p in placed) == ["a", "b"]
    return sorted((p.name, p.requests.get("cpu", 0)) for p in placed)


async def test_pods_get_the_default_request_and_are_placed_by_it(stack: Stack) -> None:
    """Two pods of 3 default cpu on nodes of 4: one per node (as written they ask for none)."""
    pods = [pod_yaml("w-0"), pod_yaml("w-1")]
    assert await gang_of_two_placed(stack, LIMIT_RANGE, pods) == [("w-0", 3000), ("w-1", 3000)]


async def test_a_pod_over_the_max_is_refused_in_kubernetes_words(stack: Stack) -> None:
    await stack.apply_all(LIMIT_RANGE)
    with pytest.raises(ClusterError) as refused:
        await stack.backend.create(yaml.safe_load(pod_yaml("big", '{limits: {cpu: "5"}}')))
    assert refused.value.reason == "Forbidden"
    assert refused.value.message == (
        'pods "big" is forbidden: maximum cpu usage per Container is 4, but limit is 5'
    )
    assert await stack.backend.list_pods() == []
