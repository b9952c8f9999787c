"""Names claimed by the `submitted` alone (`--name-claims submitted`, docs/events.md,
"One-write claims"): a Submit stores its `submitted` on its name's subject, fenced on that
name in every cluster, and writes nothing in MUSTER_NAMES. Of two gateways racing for a name
in two clusters one stores it; a retried Submit is answered as the first; a deleted name is
used again; a gateway killed mid-Submit leaves what its retry finds its own; a `submitted` and
a claim from before are still what holds their names. The duplicate window is short, so no
dedupe id decides what the fences must.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from bus_helpers import outlive_the_window, short_duplicate_window
from gateway_helpers import RunningGateway, running_gateway, two_gateways
from test_gateway_claims import delete, leave_claim
from test_gateway_submit_race import outcome, submit, workload

from muster.bus import Bus, BusConfig, connect
from muster.bus.buckets import NAMES_BUCKET
from muster.bus.partitions import QueuePartitions
from muster.bus.subjects import name_filter, name_key, workload_filters
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.gateway.claims import CLASH_LOOKBACK_S
from muster.gateway.submit import envelopes, plan_submit

pytestmark = pytest.mark.timeout(90)

WINDOW_S = 0.2  # MUSTER_EVENTS' duplicate window here (2 min in production)
PARTITIONS = QueuePartitions()  # as a gateway partitions what it stores
OLDER_NS = time.time_ns() - int((CLASH_LOOKBACK_S + 60) * 1e9)  # a run before this one


@pytest.fixture
async def two(
    bus: Bus, bus_config: BusConfig
) -> AsyncIterator[tuple[RunningGateway, RunningGateway]]:
    await short_duplicate_window(bus, WINDOW_S)
    async with two_gateways(bus_config, name_claims="submitted") as pair:
        yield pair


async def stored(bus: Bus, key: str) -> list[tuple[str, str]]:
    """(cluster, event id) of every `submitted` of `key` stored, in every cluster, oldest first."""
    last = await bus.last_sequence()
    filters = list(workload_filters("*", "submitted"))
    return [(env.cluster, env.event_id) async for env in bus.replay(filters, until_sequence=last)
            if env.workload == key]  # fmt: skip


async def claims_in_kv(bus: Bus, *keys: str) -> list[str]:
    names = await bus.kv(NAMES_BUCKET)
    return [k for k in keys if await names.last_write(name_key(k)) is not None]


async def submit_to(gw: RunningGateway, manifest: str, key: str, cluster: str) -> str:
    request = services_pb2.SubmitRequest(manifest=manifest, idempotency_key=key, cluster=cluster)
    return outcome(await gw.gateway.Submit(request, timeout=20))


@contextlib.asynccontextmanager
async def gateways_in(
    bus_config: BusConfig, modes: tuple[str, str]
) -> AsyncIterator[tuple[RunningGateway, RunningGateway]]:
    """Two gateways claiming names as `modes` say, each on its own connection."""
    one, other = await connect(bus_config), await connect(bus_config)
    try:
        async with (
            running_gateway(one, name_claims=modes[0]) as a,
            running_gateway(other, name_claims=modes[1]) as b,
        ):
            yield a, b
    finally:
        await one.close()
        await other.close()


# A rolling change of --name-claims runs each mode beside the next one.
@pytest.mark.parametrize(
    "modes", [("submitted", "submitted"), ("both", "submitted"), ("kv", "both")]
)
async def test_two_gateways_racing_for_a_name_in_two_clusters_store_it_once(
    bus: Bus, bus_config: BusConfig, modes: tuple[str, str]
) -> None:
    await short_duplicate_window(bus, WINDOW_S)
    async with gateways_in(bus_config, modes) as (a, b):
        await race_in_two_clusters(a, b, bus)
    if modes == ("submitted", "submitted"):  # the claim is the `submitted`, stored on its name
        last = await bus.last_stored(name_filter("ml/raced-again"))
        assert last is not None
        assert last.envelope is not None
        assert last.envelope.workload == "ml/raced-again"
        assert await claims_in_kv(bus, "ml/warm", "ml/raced", "ml/raced-again") == []


async def race_in_two_clusters(a: RunningGateway, b: RunningGateway, bus: Bus) -> None:
    await submit(a, workload("warm"), "warm-a")  # each index read: the one-write path
    await submit(b, workload("warm-b"), "warm-b")
    for name in ("raced", "raced-again"):
        outcomes = await asyncio.gather(
            submit_to(a, workload(name), f"{name}-a", "local"),
            submit_to(b, workload(name), f"{name}-b", "east"),
        )
        assert sorted(outcomes) == ["exists", "submitted"]
        assert len(await stored(bus, f"ml/{name}")) == 1


async def test_a_retried_submit_is_answered_as_the_first_through_either_gateway(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    a, b = two
    first = await submit(a, workload("retried"), "k")
    await outlive_the_window(bus, WINDOW_S)
    again = [await submit(a, workload("retried"), "k"), await submit(b, workload("retried"), "k")]
    assert [outcome(r) for r in again] == ["submitted", "submitted"]
    event_id = first.objects[0].event_id
    assert [r.objects[0].event_id for r in again] == [event_id, event_id]
    assert await stored(bus, "ml/retried") == [("local", event_id)]
    assert outcome(await submit(b, workload("retried"), "another")) == "exists"


async def test_a_deleted_name_is_submitted_again_by_a_gateway_that_read_the_deletion_or_not(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    a, b = two
    await submit(b, workload("warm"), "warm")  # b's index read, then no more: it is behind
    await b.server.known.stop()  # on the name's first life and its deletion
    ids = [(await submit(a, workload("reused"), "life-1")).objects[0].event_id]
    for life, via in ((2, b), (3, a), (4, b)):
        await delete(bus, "ml/reused")
        await outlive_the_window(bus, WINDOW_S)
        reply = await submit(via, workload("reused"), f"life-{life}")
        assert outcome(reply) == "submitted", life
        ids.append(reply.objects[0].event_id)
        assert outcome(await submit(a, workload("reused"), f"rival-{life}")) == "exists"
    assert await stored(bus, "ml/reused") == [("local", i) for i in ids]


async def test_names_with_dots_and_long_names_each_hold_their_own(
    two: tuple[RunningGateway, RunningGateway], bus: Bus
) -> None:
    a, b = two
    long_name = "l" * 63  # the longest a Workload may have
    names = ("train", "train.v2", "train.v2.b", long_name)
    for i, name in enumerate(names):
        assert outcome(await submit(a, workload(name), f"{i}-a")) == "submitted", name
    for i, name in enumerate(names):
        assert outcome(await submit(b, workload(name), f"{i}-b")) == "exists", name
        assert len(await stored(bus, f"ml/{name}")) == 1, name


async def test_a_submitted_and_a_claim_from_before_still_hold_their_name(
    bus: Bus, bus_config: BusConfig
) -> None:
    """A gateway from before stored `ml/legacy` on the subject without its name, after its
    claim in MUSTER_NAMES; new gateways, one whose index is read and one behind (the KV claims
    decide for it), each tell it "exists", its own retry "submitted"; once it is deleted the
    name is free."""
    await short_duplicate_window(bus, WINDOW_S)
    manifest = workload("legacy")
    (planned,) = plan_submit(manifest, cluster="local", submission="old-key")
    # Written before the lookback: a gateway of before gone since (test_gateway_claims_guard)
    (env,) = envelopes([planned], cluster="local", partition_of=PARTITIONS.of, now_ns=OLDER_NS)
    await leave_claim(bus, "ml/legacy", planned.event_id, age_s=0)
    await bus.publish(env, dedupe_id="submitted/local/ml/legacy/0")
    await outlive_the_window(bus, WINDOW_S)
    async with two_gateways(bus_config, name_claims="submitted") as (a, b):
        b.server.known.catch_up_s = 0.0  # never read: claims in MUSTER_NAMES, as before
        assert outcome(await submit(a, manifest, "new-key")) == "exists"
        assert outcome(await submit(b, manifest, "new-key")) == "exists"
        assert outcome(await submit(a, manifest, "old-key")) == "submitted"
        await delete(bus, "ml/legacy")
        reply = await submit(a, manifest, "after-delete")
        assert outcome(reply) == "submitted"
    assert [i for _, i in await stored(bus, "ml/legacy")][-1] == reply.objects[0].event_id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def gateway_process(nats_url: str, log: Path) -> AsyncIterator[tuple[int, str]]:
    """A gateway process claiming names by its `submitted` alone: (pid, address)."""
    address = f"127.0.0.1:{free_port()}"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "muster.gateway", "--nats", nats_url, "--listen", address,
            "--health-port", "0", "--name-claims", "submitted",
            stdout=asyncio.subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
        try:
            yield proc.pid, address
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def first_stored(bus: Bus, key: str) -> None:
    """Return once a `submitted` of `key` is stored on its name's subject."""
    async for _ in bus.replay([name_filter(key)], follow=True):
        return


async def test_a_gateway_killed_mid_submit_leaves_what_its_retry_finds_its_own(
    two: tuple[RunningGateway, RunningGateway], bus: Bus, nats_server: str, tmp_path: Path
) -> None:
    """SIGKILLed once the first of its 64 `submitted` is stored: each was stored whole or not
    at all, so the caller's retry through another gateway stores the rest and answers every
    one "submitted", each stored once, and another caller finds all 64 taken."""
    a, _ = two
    names = [f"killed-{i}" for i in range(64)]
    manifest = "---\n".join(workload(n) for n in names)
    async with (
        gateway_process(nats_server, tmp_path / "gateway.log") as (pid, address),
        grpc.aio.insecure_channel(address) as channel,
    ):
        await asyncio.wait_for(channel.channel_ready(), 30)
        stub = services_pb2_grpc.GatewayStub(channel)
        request = services_pb2.SubmitRequest(manifest=manifest, idempotency_key="k")
        call = asyncio.ensure_future(stub.Submit(request, timeout=30))
        await first_stored(bus, "ml/killed-0")  # the kill lands mid-Submit
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(grpc.aio.AioRpcError):
            await call
    retried = await submit(a, manifest, "k")
    assert {o.outcome or "submitted" for o in retried.objects} == {"submitted"}
    for name, obj in zip(names, retried.objects, strict=True):
        assert [i for _, i in await stored(bus, f"ml/{name}")] == [obj.event_id], name
    rival = await submit(a, manifest, "other")
    assert {o.outcome for o in rival.objects} == {"exists"}
