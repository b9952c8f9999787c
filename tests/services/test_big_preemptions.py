"""A gang outside Kueue preempted whole when its pods are over the bus's event limit (on a real
nats-server, the pod-path services in-process): `placement_preempted` counts the pods it cannot
list, the victim's `cmd.evict` goes in commands that each fit, the binder deletes every pod,
and the preemptor is bound. Before, the one event naming every pod was refused for good (at the
default 1 MiB, a victim of more than about 13 000 pods): the victim kept its pods and the
preemptor waited forever. The limit is lowered here so that a few hundred pods are over it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from bus_helpers import EventLog
from placement_stack import Stack, bare_nodes_stack, gang_yaml, limited_bus_config

from muster.bus import Bus, BusConfig
from muster.bus.envelope import encode

pytestmark = pytest.mark.timeout(60)

LIMIT = 16 * 1024
NODES = 4
PODS = 400  # ~45 bytes a pod: 18 KB of pods, over LIMIT; 100 a node


@pytest.fixture
def bus_config(nats_server: str) -> BusConfig:
    return limited_bus_config(nats_server, LIMIT)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with bare_nodes_stack(bus, events, nodes=NODES, cpu=str(PODS // NODES)) as s:
        yield s


async def test_a_gang_over_the_event_limit_is_preempted_whole_in_commands_that_each_fit(
    stack: Stack, events: EventLog
) -> None:
    await stack.apply_all(gang_yaml("low", pods=PODS))
    await stack.wait_for_pods(
        "ns/low/workers", lambda pods: sum(bool(p.node_name) for p in pods) == PODS, timeout_s=45
    )
    high = gang_yaml("high", pods=NODES, cpu=str(PODS // NODES))
    await stack.apply_all(high.replace("  workloadRef:", "  priority: 100\n  workloadRef:"))

    bound = await events.wait_for("bound", workload="ns/high/workers", timeout_s=45)

    (preempted,) = events.matching("placement_preempted", workload="ns/high/workers")
    assert list(preempted.placement_preempted.victims) == ["ns/low"]
    assert preempted.placement_preempted.pod_count == PODS
    assert len(encode(preempted)) <= LIMIT
    assert sorted(b.node for b in bound.bound.bindings) == [f"n{i}" for i in range(NODES)]
    assert await stack.pods_of("ns/low/workers") == []
    # The victim's pods went in more than one `cmd.evict` (a work queue: no reader here but the
    # binder), each answered by its own `eviction_completed`.
    await events.wait_until(
        lambda seen: len(events.matching("eviction_completed", workload="ns/low")) >= 2,
        timeout_s=10,
    )
    completed = events.matching("eviction_completed", workload="ns/low")
    assert len({c.cause for c in completed}) == len(completed)
