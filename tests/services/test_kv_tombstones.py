"""Buckets bounded by what lives, not by what was deleted (docs/events.md, "Deleted keys
leave"): a tombstone that expires, the old ones compacted by `muster nats-setup`, and the
visibility bucket after a pending list's churn and an admission restart holding no more
messages than live keys, while the gateway answers as it did."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    eventually,
    fact,
    flavor,
    local_queue,
    publish,
    running,
    start_admission,
    submitted,
    workload,
)
from gateway_helpers import RunningGateway, running_gateway
from nats.js import api

from muster.bus import Bus, BusConfig
from muster.bus.buckets import VISIBILITY_BUCKET
from muster.bus.errors import Conflict
from muster.bus.kv import open_bucket
from muster.bus.permissions import Deployment
from muster.bus.setup import setup_nats
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(90)

WAITING = 300  # pages of 32 to 128: several, merged as most leave
STAYING = 40


async def stored(bus: Bus, bucket: str) -> tuple[int, int]:
    """(messages, bytes) the bucket's stream holds: live keys, older revisions, tombstones."""
    info = await bus.js.stream_info(f"KV_{bucket}")
    return info.state.messages, info.state.bytes


async def test_a_tombstone_that_expires_leaves_nothing_and_a_fenced_one_still_loses(
    bus: Bus,
) -> None:
    kv = await open_bucket(bus.js, "T_EXPIRING")
    kept = await kv.put("kept", b"1")
    gone = await kv.put("gone", b"2")
    with pytest.raises(Conflict):
        await kv.delete("kept", last=gone, forget_after_s=1)  # not the revision it is at
    await kv.delete("gone", last=gone, forget_after_s=1)
    assert await kv.get("gone") is None
    tombstone = await kv.last_write("gone")
    assert tombstone is not None
    assert tombstone.value is None
    assert await kv.keys() == ["gone", "kept"]

    async def forgotten() -> bool:
        return await kv.keys() == ["kept"]

    await eventually(forgotten, timeout_s=10)
    assert await kv.last_write("gone") is None
    assert (await stored(bus, "T_EXPIRING"))[0] == 1
    entry = await kv.get("kept")
    assert entry is not None
    assert entry.revision == kept


async def test_nats_setup_migrates_a_visibility_bucket_made_before(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installation's MUSTER_VISIBILITY whose stream takes no message TTL (made before
    nats-py set `allow_msg_ttl`): a delete leaves a plain tombstone. `muster nats-setup` turns
    TTLs on, and removes the tombstones older than their time, not a key written after one."""
    await bus.js.add_stream(
        api.StreamConfig(
            name=f"KV_{VISIBILITY_BUCKET}",
            subjects=[f"$KV.{VISIBILITY_BUCKET}.>"],
            max_msgs_per_subject=1,
            allow_rollup_hdrs=True,
            deny_delete=True,
            allow_direct=True,
            discard=api.DiscardPolicy.NEW,
        )
    )
    kv = await open_bucket(bus.js, VISIBILITY_BUCKET)
    for key in ("cq.a", "cq.b", "cq.c"):
        await kv.put(key, b"v")
    await kv.delete("cq.a", forget_after_s=1)  # refused TTL: a plain tombstone
    await kv.delete("cq.b")
    await kv.delete("cq.c")
    await kv.put("cq.c", b"again")
    assert await kv.get("cq.a") is None
    assert (await stored(bus, VISIBILITY_BUCKET))[0] == 3

    await setup_nats(bus.js, deployment=Deployment())
    assert (await bus.js.stream_info(f"KV_{VISIBILITY_BUCKET}")).config.allow_msg_ttl
    assert await kv.keys() == ["cq.a", "cq.b", "cq.c"]  # younger than 10 minutes: kept
    monkeypatch.setattr("muster.bus.setup.VISIBILITY_TOMBSTONES_KEPT_S", 0.0)
    done = await setup_nats(bus.js, deployment=Deployment())
    assert f"2 old tombstones of {VISIBILITY_BUCKET} removed" in done
    assert await kv.keys() == ["cq.c"]
    entry = await kv.get("cq.c")
    assert entry is not None
    assert entry.value == b"again"


@pytest.fixture
async def gw(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus) as running_gw:
        yield running_gw


async def answers(gw: RunningGateway) -> list[list[tuple[str, int, int]]]:
    """The gateway's pending lists: the ClusterQueue's, then each LocalQueue's."""
    requests = [
        services_pb2.PendingWorkloadsRequest(cluster_queue="cq", limit=1000),
        services_pb2.PendingWorkloadsRequest(namespace="ns", local_queue="lq", limit=1000),
        services_pb2.PendingWorkloadsRequest(namespace="ns", local_queue="other", limit=1000),
    ]
    found = []
    for request in requests:
        reply = await gw.visibility.PendingWorkloads(request, timeout=10)
        rows = [
            (w.name, w.position_in_cluster_queue, w.position_in_local_queue) for w in reply.items
        ]
        found.append(rows)
    return found


async def test_the_visibility_bucket_after_churn_and_a_restart_holds_only_live_keys(
    bus: Bus, bus_config: BusConfig, gw: RunningGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WAITING workloads queue (pages split), all but STAYING are deleted (pages merge and
    go), admission restarts (a new epoch: every page under a new key): once the tombstones'
    time is up the bucket holds one message per live key, and the gateway answers the same."""
    monkeypatch.setattr("muster.admission.service.VISIBILITY_TOMBSTONES_KEPT_S", 1.0)
    names = [f"w{i:03}" for i in range(WAITING)]
    await publish(
        bus,
        config_applied(flavor()),
        config_applied(cluster_queue(cpu="0")),
        config_applied(local_queue("lq")),
        config_applied(local_queue("other")),
        *(submitted(workload(n, queue="lq" if i % 3 else "other")) for i, n in enumerate(names)),
    )
    kv = await bus.kv(VISIBILITY_BUCKET)

    async def index() -> services_pb2.PendingPageIndex:
        entry = await kv.get("pending-index.cq")
        return services_pb2.PendingPageIndex.FromString(entry.value or b"" if entry else b"")

    async def listed(count: int) -> bool:
        return sum(p.count for p in (await index()).pages) == count

    async with running(await start_admission(bus_config)) as (admission,):
        await admission.wait_serving()
        await eventually(lambda: listed(WAITING))
        pages_before = len(await kv.snapshot("pending-page.>"))
        await publish(bus, *(fact("deleted", f"ns/{n}") for n in names[STAYING:]))
        await eventually(lambda: listed(STAYING))
    async with running(await start_admission(bus_config)) as (admission,):
        await admission.wait_serving()
        await publish(bus, submitted(workload("late", queue="lq")))
        await eventually(lambda: listed(STAYING + 1))
        expected = await answers(gw)
        epoch = (await index()).epoch
        live = await kv.snapshot()
        assert all(k.startswith(f"pending-page.{epoch}-") for k in live if "page." in k)

        async def only_live_keys() -> bool:
            return (await stored(bus, VISIBILITY_BUCKET))[0] == len(await kv.snapshot())

        await eventually(only_live_keys, timeout_s=20)
        messages, size = await stored(bus, VISIBILITY_BUCKET)
        assert pages_before >= 3
        assert messages <= 6
        assert size < 16 * 1024
        assert await answers(gw) == expected
        assert [name for name, _, _ in expected[0]] == [*names[:STAYING], "late"]
