"""The bus's key-value and object buckets: what services get back, and the bus's errors only."""

from __future__ import annotations

import pytest

from muster.bus import Bus
from muster.bus.errors import Conflict, NotFound, Unavailable

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
