"""A launcher's gateway (`muster up`, `muster run` on its own server, the benches) claims names
by its `submitted` alone, on a store a run of an older muster left too: that run's gateway
claimed in MUSTER_NAMES and stored its `submitted` without the name. What its `submitted` hold
is still held, a deleted name is free again, and a claim whose `submitted` was never stored
holds nothing once no gateway of that run is left (docs/events.md, "One-write claims")."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc.aio
import pytest
from test_gateway_claims import delete, leave_claim
from test_gateway_one_write_claims import OLDER_NS, claims_in_kv, stored
from test_gateway_submit_race import outcome, workload

from muster.bus import Bus
from muster.bus.partitions import QueuePartitions
from muster.bus.subjects import name_filter
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.gateway.submit import envelopes, plan_submit
from muster.launcher.stack import NAME_CLAIMS_VARIABLE, SOLE_GATEWAYS_CLAIMS, Stack

pytestmark = pytest.mark.timeout(120)


async def left_by_an_older_run(bus: Bus, key: str, *, claim_only: bool = False) -> str:
    """What a gateway of before stored for `key`: its claim, then (unless it was killed in
    between) its `submitted` on the subject without the name; the submission's id."""
    name = key.split("/", 1)[1]
    (planned,) = plan_submit(workload(name), cluster="local", submission=f"old-{name}")
    await leave_claim(bus, key, planned.event_id, age_s=0)
    if not claim_only:
        # older than the lookback: a run before this one (test_gateway_claims_guard)
        (env,) = envelopes(
            [planned], cluster="local", partition_of=QueuePartitions().of, now_ns=OLDER_NS
        )
        await bus.publish(env, dedupe_id=f"submitted/local/{key}/0")
    return planned.event_id


@contextlib.asynccontextmanager
async def launched(nats_server: str, log_dir: Path) -> AsyncIterator[services_pb2_grpc.GatewayStub]:
    """The gateway as a launcher starts it (its own process, told SOLE_GATEWAYS_CLAIMS)."""
    stack = Stack(
        nats_url=nats_server, cluster="local", shards=1, speed=1, log_dir=log_dir,
        only={"gateway"}, name_claims=SOLE_GATEWAYS_CLAIMS,
    )  # fmt: skip
    try:
        await stack.start()
        async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
            yield services_pb2_grpc.GatewayStub(channel)
    finally:
        await stack.stop()


async def submit(gateway: services_pb2_grpc.GatewayStub, name: str, key: str) -> str:
    request = services_pb2.SubmitRequest(manifest=workload(name), idempotency_key=key)
    return outcome(await gateway.Submit(request, timeout=30))


async def test_a_launched_gateway_claims_by_its_submitted_on_a_store_an_older_run_left(
    bus: Bus, restart_nats: Callable[[], None], nats_server: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    old = await left_by_an_older_run(bus, "ml/legacy")
    await left_by_an_older_run(bus, "ml/gone")
    await delete(bus, "ml/gone")
    await left_by_an_older_run(bus, "ml/orphan", claim_only=True)  # killed mid-Submit
    restart_nats()  # the older run ended; its store is used again
    monkeypatch.delenv(NAME_CLAIMS_VARIABLE, raising=False)
    async with launched(nats_server, tmp_path) as gateway:
        assert await submit(gateway, "legacy", "new") == "exists"
        assert await submit(gateway, "legacy", "old-legacy") == "submitted"  # its own retry
        assert await submit(gateway, "gone", "new") == "submitted"
        assert await submit(gateway, "orphan", "new") == "submitted"
        assert await submit(gateway, "fresh", "new") == "submitted"
        for name in ("gone", "orphan", "fresh"):
            assert await submit(gateway, name, "another") == "exists", name
    assert [i for _, i in await stored(bus, "ml/legacy")] == [old]
    for name in ("gone", "orphan", "fresh"):  # one write each: on its name's subject
        last = await bus.last_stored(name_filter(f"ml/{name}"))
        assert last is not None, name
        assert last.envelope is not None, name
        assert last.envelope.workload == f"ml/{name}"
    assert await claims_in_kv(bus, "ml/fresh") == []
