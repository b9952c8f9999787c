"""Two gateways on one NATS, the same workload name submitted to both at the same instant: one
caller gets `submitted`, the other the "already exists" answer, and one `submitted` is stored
(admission would keep the first and drop the other, which its caller was told was submitted).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from gateway_helpers import RunningGateway, two_gateways

from muster.bus import Bus, BusConfig
from muster.bus.envelope import new_event
from muster.bus.subjects import workload_filters
from muster.contracts.v1 import events_pb2, services_pb2

pytestmark = pytest.mark.timeout(60)

NAMES = 40
EXISTS = "Workload/{key}: already exists; left as it is"


def workload(name: str) -> str:
    return (
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\n"
        f"metadata: {{name: {name}, namespace: ml}}\n"
        "spec:\n  queueName: team-a\n"
        "  podSets: [{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}]\n"
    )


@pytest.fixture
async def two(
    bus: Bus, bus_config: BusConfig
) -> AsyncIterator[tuple[RunningGateway, RunningGateway]]:
    """Two gateways, each with its own connection (as two replicas have); `bus` made the
    streams."""
    async with two_gateways(bus_config) as pair:
        yield pair


async def submit(gw: RunningGateway, manifest: str, key: str) -> services_pb2.SubmitResponse:
    request = services_pb2.SubmitRequest(manifest=manifest, idempotency_key=key)
    reply: services_pb2.SubmitResponse = await gw.gateway.Submit(request, timeout=20)
    return reply


async def race(
    two: tuple[RunningGateway, RunningGateway], name: str, keys: tuple[str, str]
) -> list[services_pb2.SubmitResponse]:
    """Submit `name` to both at once, with idempotency key `keys[i]` to gateway i."""
    return list(
        await asyncio.gather(
            *(submit(gw, workload(name), k) for gw, k in zip(two, keys, strict=True))
        )
    )


def outcome(reply: services_pb2.SubmitResponse) -> str:
    (obj,) = reply.objects
    if obj.outcome == "exists":
        assert list(reply.warnings) == [EXISTS.format(key=obj.key)]
        return "exists"
    assert obj.event_id
    assert not reply.warnings
    return "submitted"


async def test_one_name_raced_through_two_gateways_is_submitted_once(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    names = [f"w{i}" for i in range(NAMES)]
    replies = {name: await race(two, name, (f"{name}-via-a", f"{name}-via-b")) for name in names}
    for name, (a, b) in replies.items():
        assert sorted([outcome(a), outcome(b)]) == ["exists", "submitted"], name
    # What admission reads: one `submitted` per name, the one its caller was told of.
    winners = {
        r.objects[0].key: r.objects[0].event_id
        for pair in replies.values()
        for r in pair
        if r.objects[0].event_id
    }
    last = await bus.last_sequence()
    stored = [
        env
        async for env in bus.replay(
            list(workload_filters("local", "submitted")), until_sequence=last
        )
    ]
    assert sorted((e.workload, e.event_id) for e in stored) == sorted(winners.items())


async def test_a_submit_retried_through_the_other_gateway_is_the_same_submission(
    two: tuple[RunningGateway, RunningGateway],
) -> None:
    """The same idempotency key through both at once: one submission, answered to both."""
    a, b = await race(two, "again", ("one-call", "one-call"))
    assert outcome(a) == outcome(b) == "submitted"
    assert a.objects[0].event_id == b.objects[0].event_id


async def test_a_deleted_name_raced_for_again_is_submitted_once_more(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    first = await race(two, "reused", ("first-a", "first-b"))
    deleted = events_pb2.WorkloadDeleted()
    await bus.publish(
        new_event("deleted", deleted, cluster="local", workload="ml/reused", source="test")
    )
    second = await race(two, "reused", ("second-a", "second-b"))
    for a, b in (first, second):
        assert sorted([outcome(a), outcome(b)]) == ["exists", "submitted"]
