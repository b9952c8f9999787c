"""A request whose connection is lost fails then, not at its timeout.

nats-py leaves a request waiting for its answer when the connection drops, though the answer
went with the connection: each step of a start cut by a NATS restart cost the whole 5 s
timeout. `MusterClient` fails what waits (nats-py's requests, the publisher's PubAcks) as the
connection is lost; its caller retries, as after a timeout. Here the timeout is longer than
the test, so only the loss can end the wait.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
import nats.errors
import pytest
from admission_world import eventually
from bus_helpers import PENDING, pending
from nats_cut import StepCut
from nats_process import NatsServer

from muster.bus import Bus, BusConfig, connect
from muster.bus.errors import Retry, Unavailable

pytestmark = pytest.mark.timeout(30)

LONGER_THAN_THE_TEST_S = 300.0


async def bus_through(cut: StepCut, bus_config: BusConfig) -> Bus:
    return await connect(
        msgspec.structs.replace(bus_config, url=cut.url, publish_timeout_s=LONGER_THAN_THE_TEST_S)
    )


def connected(bus: Bus) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool(bus.nc.is_connected)

    return check


async def test_a_jetstream_request_fails_as_the_connection_is_lost(
    bus: Bus, bus_config: BusConfig, nats_process: NatsServer
) -> None:
    await bus.kv("MUSTER_TEST_LOST")
    cut = StepCut(nats_process, cut_at=b"$KV.MUSTER_TEST_LOST.k")
    async with cut:
        cut_bus = await bus_through(cut, bus_config)
        try:
            bucket = await cut_bus.kv("MUSTER_TEST_LOST")
            with pytest.raises(Unavailable) as raised:
                await bucket.create("k", b"v")  # nats-py's request, cut at its publish
            assert isinstance(raised.value.__cause__, nats.errors.ConnectionReconnectingError)
            await cut.cut.wait()  # the request was the one cut
        finally:
            await cut_bus.close()


async def test_a_publish_fails_as_the_connection_is_lost_and_is_stored_when_retried(
    bus: Bus, bus_config: BusConfig, nats_process: NatsServer
) -> None:
    env = pending("ns/a", "a")
    cut = StepCut(nats_process, cut_at=b"muster.v1.")  # the publisher's own PubAck path
    async with cut:
        cut_bus = await bus_through(cut, bus_config)
        try:
            with pytest.raises(Retry, match="NATS connection not usable"):
                await cut_bus.publish(env)
            await cut.cut.wait()  # the request was the one cut
            await eventually(connected(cut_bus))
            sequence = await cut_bus.publish(env)  # the same event: stored once
        finally:
            await cut_bus.close()
    stored = [e async for e in bus.replay([PENDING], until_sequence=sequence)]
    assert [e.event_id for e in stored] == [env.event_id]
