"""A `kv` gateway never runs beside a `submitted` one unnoticed (docs/events.md, "One-write
claims", "Gateways of modes not to run together"): the two claim systems do not see each
other, so one name could be taken twice. Each gateway says its mode in the `submitted` it
stores; one that reads a gateway of a mode it may not run beside takes no more Submits
(FAILED_PRECONDITION, health NOT_SERVING), and a `submitted` one starting beside a `kv`
one seen recently does not start (a `kv` one refuses its first Submit instead). Modes next
to each other run side by side, and history older than the lookback trips nothing. Real
nats-server.
"""

from __future__ import annotations

import time

import grpc
import grpc.aio
import pytest
from gateway_helpers import RunningGateway, running_gateway
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_gateway_one_write_claims import gateways_in, stored, submit_to
from test_gateway_submit_race import outcome, submit, workload

from muster.bus import Bus, BusConfig
from muster.gateway.claims import CLASH_LOOKBACK_S, ClaimsClashError, NameClaims
from muster.gateway.config import GatewayConfig
from muster.gateway.known import KnownFollower
from muster.gateway.service import GatewayServer

pytestmark = pytest.mark.timeout(90)

GATEWAY = "muster.v1.Gateway"


async def not_serving(gw: RunningGateway) -> None:
    """Return once `gw` reports its Submit service NOT_SERVING (awaited, not polled)."""
    watch = health_pb2_grpc.HealthStub(gw.channel).Watch(
        health_pb2.HealthCheckRequest(service=GATEWAY), timeout=30
    )
    async for reply in watch:
        if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
            watch.cancel()
            return
    raise AssertionError("the health watch ended while serving")


async def serving(gw: RunningGateway) -> bool:
    stub = health_pb2_grpc.HealthStub(gw.channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=GATEWAY), timeout=10)
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def refused(gw: RunningGateway, name: str, key: str) -> str:
    """The FAILED_PRECONDITION `gw` answers a Submit of `name` with."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await submit(gw, workload(name), key)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return err.value.details() or ""


async def test_a_submitted_gateway_that_reads_a_kv_one_takes_no_name_it_could_take_twice(
    bus: Bus, bus_config: BusConfig
) -> None:
    # Two clusters: the message id of a name's `submitted` (per cluster, 2 min) must not be
    # what keeps the two apart; only the claims may.
    async with gateways_in(bus_config, ("kv", "submitted")) as (kv, one_write):
        assert outcome(await submit(kv, workload("first"), "first")) == "submitted"
        # The kv gateway's index is behind from here (two Submits racing): on main, both
        # gateways then store `ml/twice`, each its own claim (two workloads).
        await kv.server.known.stop()
        await not_serving(one_write)  # it read the kv gateway's `submitted`
        problem = await refused(one_write, "twice", "via-submitted")
        for said in ("--name-claims kv", "--name-claims submitted", "next one only"):
            assert said in problem
        assert await submit_to(kv, workload("twice"), "via-kv", "east") == "submitted"
        assert await serving(kv)  # it read nothing of the other: it stored nothing
    assert len(await stored(bus, "ml/twice")) == 1
    assert len(await stored(bus, "ml/first")) == 1


async def test_a_kv_gateway_that_reads_a_submitted_one_stops_taking_submits(
    bus: Bus, bus_config: BusConfig
) -> None:
    async with gateways_in(bus_config, ("kv", "submitted")) as (kv, one_write):
        await submit_to(one_write, workload("first"), "first", "east")
        # A kv gateway reads its index from its first Submit on: that Submit is refused.
        assert "--name-claims submitted" in await refused(kv, "twice", "via-kv")
        await not_serving(kv)
        assert await submit_to(one_write, workload("twice"), "via-submitted", "local") == (
            "submitted"
        )
    assert len(await stored(bus, "ml/twice")) == 1


@pytest.mark.parametrize("modes", [("kv", "both"), ("both", "submitted")])
async def test_modes_next_to_each_other_take_submits_side_by_side(
    bus: Bus, bus_config: BusConfig, modes: tuple[str, str]
) -> None:
    async with gateways_in(bus_config, modes) as (a, b):
        await submit_to(a, workload("from-a"), "a", "local")
        await submit_to(b, workload("from-b"), "b", "east")
        # Each answers "exists" for the other's only once its index read the stream to its end
        # (`KnownFollower.duplicates`): it has read the other's `submitted` by then.
        assert await submit_to(a, workload("from-b"), "a2", "local") == "exists"
        assert await submit_to(b, workload("from-a"), "b2", "east") == "exists"
        assert await submit_to(a, workload("later-a"), "a3", "local") == "submitted"
        assert await submit_to(b, workload("later-b"), "b3", "east") == "submitted"
        assert [await serving(a), await serving(b)] == [True, True]


async def start_later(bus: Bus, mode: NameClaims, ahead_s: float) -> GatewayServer:
    """A gateway of `mode` started as if `ahead_s` had passed since what is stored."""
    config = GatewayConfig(listen="127.0.0.1:0", grace_s=1.0, name_claims=mode)
    server = GatewayServer(bus, config)
    server.known = KnownFollower(
        bus, claims=config.name_claims, clock=lambda: time.time() + ahead_s
    )
    await server.start()
    return server


async def test_a_rolled_out_gateway_starts_only_past_the_lookback_of_the_mode_before_last(
    bus: Bus,
) -> None:
    async with running_gateway(bus, name_claims="kv") as kv:
        await submit(kv, workload("kv-era"), "kv-era")
    async with running_gateway(bus, name_claims="both") as both:  # beside kv: starts at once
        assert outcome(await submit(both, workload("both-era"), "both-era")) == "submitted"
    with pytest.raises(ClaimsClashError, match="--name-claims kv"):
        await start_later(bus, "submitted", 0.0)  # a kv gateway stored a moment ago
    server = await start_later(bus, "submitted", CLASH_LOOKBACK_S + 1)
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            gw = RunningGateway(server=server, address=server.address, channel=channel)
            assert outcome(await submit(gw, workload("one-write"), "one-write")) == "submitted"
            assert await submit_to(gw, workload("kv-era"), "again", "local") == "exists"
            assert await serving(gw)
    finally:
        await server.stop()
