"""A Submit's end on either gRPC server (`--grpc-server threads|aio`), against a real
nats-server over real channels: a call its client cancels or whose deadline passes mid-Submit
stops its handler and stores nothing, and the same Submit again is stored once; a gateway
stopped with Submits in flight answers those that finish within the grace period (each stored
once) and ends the rest with a clear status, storing none of them; past `--max-calls` a call
is refused naming the limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Sequence

import grpc
import grpc.aio
import pytest
from gateway_helpers import RunningGateway, running_gateway, stored_count, workload

from muster.bus import Bus
from muster.contracts.v1 import services_pb2
from muster.gateway.config import GRPC_SERVERS
from muster.gateway.loop_server import refused_message
from muster.gateway.submit import PlannedEvent

pytestmark = pytest.mark.timeout(90)


def submit(name: str) -> services_pb2.SubmitRequest:
    return services_pb2.SubmitRequest(manifest=workload(name), idempotency_key=name)


class Held:
    """Submits held where they look for duplicates (before anything is stored): `entered`
    counts those holding, `cancelled` those whose handler was cancelled there; the names in
    `released` go on once `release` is set."""

    def __init__(self, gw: RunningGateway, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered: list[str] = []
        self.cancelled: list[str] = []
        self.released: Collection[str] = ()
        self.release = asyncio.Event()
        self._changed = asyncio.Event()
        duplicates = gw.server.known.duplicates

        async def held(planned: Sequence[PlannedEvent]) -> list[PlannedEvent]:
            name = planned[0].key.rsplit("/", 1)[-1]
            self._note(self.entered, name)
            try:
                await self.release.wait()
                while name not in self.released:
                    await asyncio.Event().wait()
            except asyncio.CancelledError:
                self._note(self.cancelled, name)
                raise
            return await duplicates(planned)

        monkeypatch.setattr(gw.server.known, "duplicates", held)

    def _note(self, where: list[str], name: str) -> None:
        where.append(name)
        self._changed.set()

    async def until(self, where: list[str], count: int) -> None:
        async with asyncio.timeout(20):
            while len(where) < count:
                self._changed.clear()
                await self._changed.wait()


@pytest.fixture(params=GRPC_SERVERS)
async def gw(bus: Bus, request: pytest.FixtureRequest) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus, grpc_server=request.param, grace_s=5.0, max_calls=8) as gw:
        yield gw


async def test_a_submit_cancelled_mid_call_stores_nothing_and_is_stored_once_when_sent_again(
    gw: RunningGateway, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held(gw, monkeypatch)
    call = gw.gateway.Submit(submit("w"), timeout=30)
    await held.until(held.entered, 1)
    call.cancel()
    await held.until(held.cancelled, 1)  # the handler stopped, not left waiting
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await stored_count(bus) == 0

    held.released = {"w"}
    held.release.set()
    first = await gw.gateway.Submit(submit("w"), timeout=30)
    again = await gw.gateway.Submit(submit("w"), timeout=30)
    assert [o.key for o in first.objects] == ["ml/w"]
    assert [o.event_id for o in again.objects] == [o.event_id for o in first.objects]
    assert await stored_count(bus) == 1


async def test_a_submit_whose_deadline_passes_mid_call_stores_nothing(
    gw: RunningGateway, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held(gw, monkeypatch)
    # Long enough for a loaded machine to reach the handler, which then waits past it.
    call = gw.gateway.Submit(submit("w"), timeout=3.0)
    await held.until(held.entered, 1)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await held.until(held.cancelled, 1)
    assert await stored_count(bus) == 0


async def test_stopping_with_submits_in_flight_answers_those_done_in_time_and_ends_the_rest(
    gw: RunningGateway, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held(gw, monkeypatch)
    names = [f"w{i}" for i in range(6)]
    calls = [asyncio.ensure_future(gw.gateway.Submit(submit(n), timeout=60)) for n in names]
    await held.until(held.entered, len(names))

    stopping = asyncio.ensure_future(gw.server.stop())  # grace 5 s: new calls refused now
    held.released = set(names[:3])
    held.release.set()
    async with asyncio.timeout(20):
        await stopping
    outcomes = await asyncio.gather(*calls, return_exceptions=True)

    answered = [o for o in outcomes[:3] if isinstance(o, services_pb2.SubmitResponse)]
    assert [o.objects[0].key for o in answered] == [f"ml/{n}" for n in names[:3]]
    ended = outcomes[3:]
    assert all(isinstance(o, grpc.aio.AioRpcError) for o in ended), ended
    codes = {o.code() for o in ended if isinstance(o, grpc.aio.AioRpcError)}
    assert codes <= {grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE}, codes
    await held.until(held.cancelled, 3)  # no handler left running on the loop
    assert sorted(held.cancelled) == names[3:]
    assert await stored_count(bus) == 3  # the answered ones, once each


async def test_a_call_past_max_calls_is_refused_naming_the_limit(
    gw: RunningGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held(gw, monkeypatch)
    calls = [asyncio.ensure_future(gw.gateway.Submit(submit(f"w{i}"))) for i in range(8)]
    await held.until(held.entered, 8)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await gw.visibility.QueueStatus(services_pb2.QueueStatusRequest(), timeout=10)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert raised.value.details() == refused_message(8)
    held.released = {f"w{i}" for i in range(8)}
    held.release.set()
    answers = await asyncio.gather(*calls)
    assert [a.objects[0].key for a in answers] == [f"ml/w{i}" for i in range(8)]
