"""The bus's key-value and object buckets: what services get back, and the bus's errors only."""

from __future__ import annotations

import pytest

from muster.bus import Bus
from muster.bus.errors import Conflict, NotFound, Unavailable
from muster.bus.kv import Bucket, Change, open_bucket

pytestmark = pytest.mark.timeout(30)


async def test_a_missing_deleted_or_impossible_key_reads_as_none(bus: Bus) -> None:
    kv = await bus.kv("MUSTER_VISIBILITY")
    await kv.put("cq.a", b"x")
    await kv.delete("cq.a")
    await kv.delete("cq.never")  # deleting nothing is fine
    assert await kv.get("cq.a") is None
    assert await kv.get("cq.never") is None
    assert await kv.get("a b") is None


async def test_compare_and_set_losers_get_conflict_naming_the_key(bus: Bus) -> None:
    kv = await bus.kv("MUSTER_SHARDS", ttl_s=5)
    first = await kv.create("admission.0", b"one")
    with pytest.raises(Conflict, match=r"\$KV.MUSTER_SHARDS.admission.0"):
        await kv.create("admission.0", b"two")
    second = await kv.update("admission.0", b"one", last=first)
    with pytest.raises(Conflict) as lost:
        await kv.update("admission.0", b"two", last=first)
    assert lost.value.expected == first
    entry = await kv.get("admission.0")
    assert entry is not None
    assert (entry.value, entry.revision) == (b"one", second)


async def test_snapshot_and_watch_read_live_values_with_their_time(bus: Bus) -> None:
    kv = await bus.kv("MUSTER_VISIBILITY")
    await kv.put("cq.a", b"1")
    await kv.put("cq.b", b"2")
    await kv.put("lq.ns.a", b"3")
    await kv.delete("cq.b")
    found = await kv.snapshot("cq.>")
    assert {k: e.value for k, e in found.items()} == {"cq.a": b"1"}
    assert found["cq.a"].created > 0
    seen = []
    async for entry in kv.watch("cq.>"):
        if entry is None:
            break
        seen.append((entry.key, entry.value))
    assert seen == [("cq.a", b"1"), ("cq.b", None)]


async def test_a_closed_connection_is_unavailable_not_a_nats_error(bus: Bus) -> None:
    kv = await bus.kv("MUSTER_VISIBILITY")
    await bus.nc.close()
    with pytest.raises(Unavailable, match=r"MUSTER_VISIBILITY put cq\.a"):
        await kv.put("cq.a", b"1")


async def test_objects_round_trip_in_chunks_with_headers(bus: Bus) -> None:
    store = bus.objects("MUSTER_SNAPSHOTS", chunk_bytes=1024)
    assert await store.list() == []  # no bucket yet: nothing, and nothing created
    with pytest.raises(NotFound):
        await store.get("admission-0")
    data = bytes(range(256)) * 20
    await store.put("admission-0", data, headers={"Muster-Sequence": ["7"]})
    assert await store.get("admission-0") == data
    [listed] = await store.list()
    assert (listed.name, listed.headers["Muster-Sequence"]) == ("admission-0", ["7"])
    with pytest.raises(NotFound):
        await store.get("admission-1")


@pytest.fixture(params=["bus-publisher", "nats-py"])
async def sim_bucket(bus: Bus, request: pytest.FixtureRequest) -> Bucket:
    """A bucket whose raw writes go through the bus's publisher (as services' do) or nats-py."""
    if request.param == "bus-publisher":
        return await bus.kv("MUSTER_SIM_local")
    return await open_bucket(bus.js, "MUSTER_SIM_local")


async def test_fenced_writes_and_tombstones_that_keep_their_body(sim_bucket: Bucket) -> None:
    kv = sim_bucket
    assert await kv.last_write("pod.a") is None
    first = await kv.write("pod.a", b"1", last=0)
    with pytest.raises(Conflict) as lost:
        await kv.write("pod.a", b"2", last=0)
    assert lost.value.expected == 0
    gone = await kv.write("pod.a", b"last", last=first, deleting=True)
    assert await kv.get("pod.a") is None  # a delete to every KV reader
    tombstone = await kv.last_write("pod.a")
    assert tombstone is not None
    assert (tombstone.value, tombstone.revision) == (None, gone)
    feed = kv.changes(after=first)
    try:
        assert await anext(feed) == Change("pod.a", b"last", gone, deleted=True)
    finally:
        await feed.aclose()
    again = await kv.write("pod.a", b"3", last=gone)
    live = await kv.last_write("pod.a")
    assert live is not None
    assert (live.value, live.revision) == (b"3", again)


async def test_keys_last_revision_and_a_change_feed_in_revision_order(bus: Bus) -> None:
    kv = await bus.kv("MUSTER_SIM_local")
    assert (await kv.last_revision(), await kv.keys()) == (0, [])
    a = await kv.write("pod.ml.a", b"a1", last=0)
    n = await kv.write("node.n", b"n1", last=0)
    a2 = await kv.write("pod.ml.a", b"a2", last=a)
    await kv.write("obj.x", b"x", last=0)
    assert await kv.keys("pod.") == ["pod.ml.a"]
    assert await kv.keys() == ["node.n", "obj.x", "pod.ml.a"]
    feed = kv.changes("pod.", "node.")
    try:
        # Each key at its last write, then each new write as it comes, across the prefixes.
        seen = [await anext(feed), await anext(feed)]
        assert seen == [Change("node.n", b"n1", n, False), Change("pod.ml.a", b"a2", a2, False)]
        later = await kv.write("node.n", b"n2", last=n)
        assert await anext(feed) == Change("node.n", b"n2", later, False)
    finally:
        await feed.aclose()
    assert await kv.last_revision() == later
