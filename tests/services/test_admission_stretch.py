"""One admission replica of four, as `muster run --shards 4` configures it, against a real
nats-server: the events that come within its stretch are one round, as a lone replica's round
takes what came meanwhile, even when the replica's pull request expires mid-stretch (issue 19:
rounds per workload at 4 shards)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec
import pytest
from admission_world import drained
from bus_helpers import SUBMITTED, submitted

from muster.admission.__main__ import configs
from muster.bus import Bus, Reject
from muster.bus.ordered import consume_in_order, make_consumer
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(30)

STRETCH_S = 3.0  # outlasts the trickle on a loaded machine; the test's length
EXPIRY_S = 0.3  # the replica's pull requests: several expire within the stretch


async def test_a_stretched_replica_takes_what_came_within_its_stretch_as_one_round(
    bus: Bus,
) -> None:
    config = configs(["--shards", "4", "--shard", "1"])[1]
    gather = config.gather
    assert gather is not None
    assert gather.stretch == 4
    trickle = gather.fill - 1  # fewer than cut a stretch short
    # Only the stretch's length is the test's: long enough for the trickle to come within it
    # on any machine, so that only its end or the events' count can start the second round.
    gather = gather._replace(stretch=1e6, stretch_most_s=STRETCH_S)
    settings = msgspec.structs.replace(config.consumer_settings(), request_expiry_s=EXPIRY_S)
    await bus.publish(submitted("ns/w0"))
    await make_consumer(bus, config.durable, [SUBMITTED], settings, start_sequence=1)
    rounds: list[list[int]] = []
    first = asyncio.Event()

    async def handle(envs: Sequence[pb.Envelope], raw: Sequence[bytes]) -> list[Reject | None]:
        rounds.append([env.sequence for env in envs])
        if not first.is_set():
            await asyncio.sleep(0.001)  # the first round's length, which the stretch multiplies
        first.set()
        return [None] * len(envs)

    loop = asyncio.create_task(
        consume_in_order(bus, config.durable, handle, settings, gather=gather)
    )
    try:
        await first.wait()  # the first event found the replica idle: taken at once, alone
        for i in range(1, trickle + 1):  # each stored before the next is sent: a trickle
            await bus.publish(submitted(f"ns/w{i}"))
            if i == trickle // 2:
                await asyncio.sleep(2 * EXPIRY_S)  # the request the stretch began with expires
        await drained(bus, config.durable, timeout_s=STRETCH_S + 10)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    # One round at the stretch's end: the expired request was replaced while gathering, and
    # its end did not start the round with half the trickle.
    assert rounds == [[1], list(range(2, trickle + 2))]
