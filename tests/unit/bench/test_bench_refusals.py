"""A bench Submit refused for the gateway's limit on calls is sent again; nothing else is."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest

from muster.bench.refusals import GIVE_UP_S, MAX_BACKOFF_S, Refusals, refused_for_limit
from muster.gateway.loop_server import refused_message


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class Gateway:
    """Answers "ok" once it has refused `refusals` calls with `error`."""

    def __init__(self, refusals: int, error: grpc.aio.AioRpcError) -> None:
        self.left = refusals
        self.error = error
        self.calls = 0

    async def submit(self) -> str:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise self.error
        return "ok"


class Clock:
    def __init__(self) -> None:
        self.pauses: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)


LIMIT = rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, refused_message(256))
GRPC_LIMIT = rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")


@pytest.mark.parametrize("error", [LIMIT, GRPC_LIMIT], ids=["gateway's", "grpc's"])
async def test_a_call_refused_for_the_limit_is_sent_again_and_counted(
    error: grpc.aio.AioRpcError,
) -> None:
    gateway, clock = Gateway(3, error), Clock()
    refusals = Refusals(sleep=clock.sleep)

    assert await refusals.call(gateway.submit) == "ok"

    assert (gateway.calls, refusals.count, len(clock.pauses)) == (4, 3, 3)
    assert clock.pauses[0] < clock.pauses[2]  # backing off


@pytest.mark.parametrize(
    "error",
    [
        rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "Received message larger than max"),
        rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "manifest: not YAML"),
        rpc_error(grpc.StatusCode.UNAVAILABLE, "calls at once"),
    ],
    ids=["too large", "invalid", "unavailable"],
)
async def test_any_other_error_ends_the_case(error: grpc.aio.AioRpcError) -> None:
    gateway, clock = Gateway(1, error), Clock()
    refusals = Refusals(sleep=clock.sleep)

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await refusals.call(gateway.submit)

    assert caught.value is error
    assert (gateway.calls, refusals.count) == (1, 0)
    assert not refused_for_limit(error)


async def test_refusals_that_never_end_end_the_case() -> None:
    gateway, clock = Gateway(10_000, LIMIT), Clock()
    refusals = Refusals(sleep=clock.sleep)

    with pytest.raises(grpc.aio.AioRpcError):
        await refusals.call(gateway.submit)

    assert GIVE_UP_S <= sum(clock.pauses) < GIVE_UP_S + MAX_BACKOFF_S
    assert gateway.calls == refusals.count + 1
