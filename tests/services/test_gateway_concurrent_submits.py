"""Many Submits at once through the gateway's threads and its loop (`loop_server.LoopInbox`
hands them over in batches), against a real nats-server over real gRPC channels: each call
gets its own answer, and a retry the same; a call whose store fails gets the error while the
calls beside it are stored; stopping the gateway with calls in flight ends every one of them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import TypeAlias

import grpc
import grpc.aio
import pytest
from gateway_helpers import running_gateway, stored_count, workload

from muster.bus import Bus
from muster.bus.errors import BusError
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.gateway.loop_server import HOT_THREADS

pytestmark = pytest.mark.timeout(90)

CALLS = 6 * HOT_THREADS  # more calls at once than threads take them: some wait their turn


Answer: TypeAlias = services_pb2.SubmitResponse | grpc.RpcError


def submit_at_once(address: str, names: Sequence[str]) -> dict[str, Answer]:
    """One thread per name, each with its own channel (as separate clients), all calling
    Submit at the same moment (idempotency key: the name); each name's answer or error."""
    answers: dict[str, Answer] = {}
    start = threading.Barrier(len(names))

    def call(name: str) -> None:
        with grpc.insecure_channel(address) as channel:
            stub = services_pb2_grpc.GatewayStub(channel)
            grpc.channel_ready_future(channel).result(timeout=20)
            request = services_pb2.SubmitRequest(manifest=workload(name), idempotency_key=name)
            start.wait(timeout=20)
            try:
                answers[name] = stub.Submit(request, timeout=30)
            except grpc.RpcError as exc:
                answers[name] = exc

    threads = [threading.Thread(target=call, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def submitted_key(answer: Answer) -> tuple[str, str]:
    """A successful answer's one object: its key and event id."""
    assert isinstance(answer, services_pb2.SubmitResponse), answer
    (obj,) = answer.objects
    assert obj.event_id, obj
    return obj.key, obj.event_id


class Countdown:
    """`done` is set once `count` has been called `n` times."""

    def __init__(self, n: int) -> None:
        self._left = n
        self.done = asyncio.Event()

    def count(self) -> None:
        self._left -= 1
        if self._left == 0:
            self.done.set()


async def test_submits_from_many_threads_at_once_are_each_answered_and_the_same_on_retry(
    bus: Bus,
) -> None:
    names = [f"w{i}" for i in range(CALLS)]
    async with running_gateway(bus) as gw:
        first = await asyncio.to_thread(submit_at_once, gw.address, names)
        again = await asyncio.to_thread(submit_at_once, gw.address, names)
        stored = await stored_count(bus)

    keys = {name: submitted_key(first[name]) for name in names}
    assert {name: key for name, (key, _) in keys.items()} == {n: f"ml/{n}" for n in names}
    assert len({event_id for _, event_id in keys.values()}) == CALLS
    assert {name: submitted_key(again[name]) for name in names} == keys  # the same submission
    assert stored == CALLS  # each once


async def test_submits_whose_store_fails_are_told_so_and_the_calls_beside_them_are_stored(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"w{i}" for i in range(CALLS)]
    failing = {f"ml/{n}" for n in names[::3]}
    async with running_gateway(bus) as gw:
        publish = gw.server.known.publish

        async def publish_failing(to: object, envs: Sequence[events_pb2.Envelope]) -> set[str]:
            if any(env.workload in failing for env in envs):
                raise BusError("nats: timeout")
            return await publish(to, envs)  # type: ignore[arg-type]  # the gateway's bus

        monkeypatch.setattr(gw.server.known, "publish", publish_failing)
        first = await asyncio.to_thread(submit_at_once, gw.address, names)
        stored_meanwhile = await stored_count(bus)
        monkeypatch.setattr(gw.server.known, "publish", publish)
        again = sorted(key.removeprefix("ml/") for key in failing)
        retried = await asyncio.to_thread(submit_at_once, gw.address, again)
        stored = await stored_count(bus)

    for name in again:
        error = first[name]
        assert isinstance(error, grpc.RpcError)
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert "nats: timeout; retry the Submit" in (error.details() or "")
        assert submitted_key(retried[name])[0] == f"ml/{name}"
    stored_first = [n for n in names if n not in again]
    assert {submitted_key(first[n])[0] for n in stored_first} == {f"ml/{n}" for n in stored_first}
    assert stored_meanwhile == CALLS - len(failing)
    assert stored == CALLS


async def test_stopping_the_gateway_with_submits_in_flight_ends_each_and_stores_none(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_flight = HOT_THREADS + 4  # some on the hot threads, some on threads past `SLOW_S`
    async with running_gateway(bus, grace_s=0.5) as gw:
        # The handlers run on this test's loop: counted as they enter and as they are cancelled.
        waiting, cancelled = Countdown(in_flight), Countdown(in_flight)

        async def stuck_duplicates(planned: object) -> list[object]:
            waiting.count()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.count()
                raise
            return []

        monkeypatch.setattr(gw.server.known, "duplicates", stuck_duplicates)
        calls = [
            asyncio.ensure_future(
                gw.gateway.Submit(
                    services_pb2.SubmitRequest(manifest=workload(f"w{i}")), timeout=60
                )
            )
            for i in range(in_flight)
        ]

        async with asyncio.timeout(20):
            await waiting.done.wait()
        async with asyncio.timeout(10):  # the grace period, then the calls are ended
            await gw.server.stop()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)

        async with asyncio.timeout(20):  # no handler left running on the loop
            await cancelled.done.wait()
        assert await stored_count(bus) == 0
    codes = {o.code() for o in outcomes if isinstance(o, grpc.aio.AioRpcError)}
    assert len([o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]) == in_flight
    assert codes <= {grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE}, codes
