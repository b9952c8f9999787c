"""A gang whose permit is over the bus's event limit (on a real nats-server, the pod-path
services in-process): it goes in parts that each fit, every part is bound and answered, and
every pod is bound where the permit placed it, also when gang-permit restarts before the binder
answers the parts. Before, the one `gang_permitted` was refused for
good and the gang held its room with nothing bound: at the default 1 MiB, any gang of more than
about 13 000 pods. The limit is lowered here so that a few hundred pods need parts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import yaml
from bus_helpers import EventLog
from placement_stack import (
    Stack,
    bare_nodes_stack,
    gang_yaml,
    limited_bus_config,
    submit_and_admit,
)

from muster.bus import Bus, BusConfig
from muster.bus.envelope import encode
from muster.contracts.v1 import events_pb2

pytestmark = pytest.mark.timeout(60)

LIMIT = 16 * 1024
PODS = 600  # ~75 bytes a binding: 45 KB of bindings, three parts or more
NODES = 6  # 110 pods each


@pytest.fixture
def bus_config(nats_server: str) -> BusConfig:
    return limited_bus_config(nats_server, LIMIT)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with bare_nodes_stack(bus, events, nodes=NODES) as s:
        yield s


def bound_pods(seen: list[events_pb2.Envelope], workload: str) -> int:
    return sum(
        len(e.bound.bindings) for e in seen if e.type == "workload.bound" and e.workload == workload
    )


async def test_a_permit_over_the_event_limit_is_bound_whole_in_parts_that_each_fit(
    stack: Stack, events: EventLog
) -> None:
    big = await submit_and_admit(stack, "big", count=PODS, cpu="100m")
    await events.wait_until(lambda seen: bound_pods(seen, big) >= PODS, timeout_s=45)

    permits = events.matching("gang_permitted", workload=big)
    answers = events.matching("bound", workload=big)
    assert len(permits) > 1
    assert events.matching("gang_rejected", workload=big) == []
    # One permit, every part of it answered by its own `bound`, each within the limit.
    assert {p.gang_permitted.permit_id for p in permits} == {permits[0].gang_permitted.permit_id}
    assert sorted(p.gang_permitted.part for p in permits) == list(range(len(permits)))
    assert sorted(a.cause for a in answers) == sorted(p.event_id for p in permits)
    assert all(len(encode(e)) <= LIMIT for e in [*permits, *answers])
    # Every pod once, bound where the permit placed it.
    placed = {b.pod.name: b.node for p in permits for b in p.gang_permitted.bindings}
    assert len(placed) == PODS
    assert {b.pod.name: b.node for a in answers for b in a.bound.bindings} == placed
    pods = await stack.pods_of(big)
    assert {p.name: p.node_name for p in pods} == placed


async def test_a_gang_permit_restarted_before_the_binder_answers_a_permit_in_parts_holds_it(
    stack: Stack, events: EventLog
) -> None:
    await stack.stop("binder")  # every part stays unanswered while gang-permit restarts
    for doc in yaml.safe_load_all(gang_yaml("big", pods=PODS, cpu="100m")):
        await stack.backend.apply(doc)
    gang = "ns/big/workers"
    await events.wait_until(
        lambda seen: (
            (permits := [e for e in seen if e.type == "workload.gang_permitted"]) != []
            and len(permits) == permits[0].gang_permitted.parts
        ),
        timeout_s=45,
    )
    permits = events.matching("gang_permitted", workload=gang)
    await stack.stop("gangpermit")
    await stack.start_gangpermit()
    # The successor read the stream and the cluster and decided a pass since: a gang applied
    # now is permitted, and `big`'s parts read back hold its pods where they were placed.
    for doc in yaml.safe_load_all(gang_yaml("probe", pods=1, cpu="100m")):
        await stack.backend.apply(doc)
    await events.wait_for("gang_permitted", workload="ns/probe/workers", timeout_s=20)
    assert events.matching("gang_permitted", workload=gang) == permits

    await stack.start_binder()
    await events.wait_until(lambda seen: bound_pods(seen, gang) >= PODS, timeout_s=45)
    placed = {b.pod.name: b.node for p in permits for b in p.gang_permitted.bindings}
    assert {p.name: p.node_name for p in await stack.pods_of(gang)} == placed
    assert events.matching("gang_permitted", workload=gang) == permits
