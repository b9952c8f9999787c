"""One client opening watch after watch (a script, a dashboard tab reconnecting) against a
secured gateway on a real nats-server: it gets its share and a clear RESOURCE_EXHAUSTED past
it; every other user's calls and watches are still served."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from gateway_helpers import RunningGateway, consumer_count
from security_helpers import as_user, manifest, secured_gateway

from muster.bus import Bus
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)

MAX_CALLS = 16  # watches: 8 at once in all, 2 per user


@pytest.fixture
async def gw(bus: Bus, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    async with secured_gateway(bus, tmp_path, max_calls=MAX_CALLS) as running:
        yield running


async def refusal(call: grpc.aio.UnaryStreamCall) -> tuple[grpc.StatusCode, str] | None:
    """How a following Watch was refused, or None when it is still open after 1 s (left open:
    a read cancelled by a timeout would cancel the call)."""
    reading = asyncio.ensure_future(call.read())
    done, _ = await asyncio.wait({reading}, timeout=1)
    if not done:
        return None
    try:
        reading.result()
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    raise AssertionError("a watch of nothing yielded an event")


async def test_a_user_opening_many_watches_leaves_room_for_everyone_else(
    gw: RunningGateway, bus: Bus
) -> None:
    request = services_pb2.WatchRequest(namespace="team-a", from_sequence=1)
    flood = [
        gw.events.Watch(services_pb2.WatchRequest(), metadata=as_user("viewer"))
        for _ in range(MAX_CALLS)  # before: every call the gateway takes, a Watch
    ]
    outcomes = await asyncio.gather(*(refusal(call) for call in flood))

    # alice, meanwhile: her Submit, a listing and a watch of her own are served.
    job = manifest("Job", "team-a", "after-flood")
    submitted = await gw.gateway.Submit(
        services_pb2.SubmitRequest(manifest=job), metadata=as_user("alice"), timeout=10
    )
    listed = await gw.visibility.ListWorkloads(
        services_pb2.ListWorkloadsRequest(namespace="team-a"), metadata=as_user("alice"), timeout=10
    )
    hers = gw.events.Watch(request, metadata=as_user("alice"))
    first = await asyncio.wait_for(hers.read(), timeout=10)

    assert [o.key for o in submitted.objects] == [first.workload]
    assert [w.key for w in listed.items] == [first.workload]
    refused = [o for o in outcomes if o is not None]
    assert len(refused) == MAX_CALLS - 2
    assert set(refused) == {
        (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "Events.Watch: user 'viewer' already has 2 watches open, at most 2 at once;"
            " end one (or watch several namespaces in one)",
        )
    }
    for call in (*flood, hers):
        call.cancel()


async def test_a_watch_ended_gives_its_place_back(gw: RunningGateway, bus: Bus) -> None:
    everything = services_pb2.WatchRequest()
    held = [gw.events.Watch(everything, metadata=as_user("viewer")) for _ in range(2)]
    assert [await refusal(call) for call in held] == [None, None]

    held[0].cancel()
    async with asyncio.timeout(10):
        while await consumer_count(bus) > 1:  # noqa: ASYNC110  # nats-server state: no event
            await asyncio.sleep(0.05)
    again = gw.events.Watch(everything, metadata=as_user("viewer"))

    assert await refusal(again) is None
    for call in (held[1], again):
        call.cancel()
