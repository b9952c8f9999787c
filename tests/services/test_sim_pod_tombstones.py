"""The simulated cluster's pod tombstones leave once the watcher has read them and they are
older than `--pod-tombstones-kept-seconds` (task longrun; before, one stayed per pod ever
deleted); a watch resumed from the watcher's point still sees every deletion after it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import test_cluster_sim_collector as collector
from test_cluster_sim_collector import deleted, started, until

from muster.bus import Bus
from muster.bus.buckets import WATCHER_BUCKET
from muster.bus.kv import Bucket
from muster.cluster.errors import ExpiredError
from muster.cluster.keys import bucket_name
from muster.cluster.sim import SimBackend, pod_key
from muster.cluster.sim.tombstones import prune_once

pytestmark = pytest.mark.timeout(60)

N = 12  # workloads run, finished and deleted
SIM_STREAM = f"KV_{bucket_name('local')}"


sim = collector.sim  # the fixture: a node n1 in the sim cluster "local"


async def stored(bus: Bus) -> int:
    """Messages in the cluster's bucket: live keys and tombstones."""
    return int((await bus.js.stream_info(SIM_STREAM)).state.messages)


async def watcher_read(bus: Bus, revision: int | bytes) -> Bucket:
    """The cluster's watcher has handled the store up to `revision` (its MUSTER_WATCHER key)."""
    kv = await bus.kv(WATCHER_BUCKET)
    await kv.put("local", revision if isinstance(revision, bytes) else str(revision).encode())
    return kv


async def run_and_delete(bus: Bus, sim: SimBackend, names: list[str]) -> set[str]:
    """Workloads ml/<name> run to the end and are deleted; their pods collected."""
    admission = await deleted(bus, "before-any")
    pods = {await started(sim, name, admission=admission) for name in names}
    await until(sim.store, pods, phase="Succeeded")
    revision = await sim.store.last_revision()
    await deleted(bus, *names)
    await until(sim.store, pods, gone_after=revision)
    return pods


async def test_tombstones_the_watcher_read_leave_and_the_bucket_holds_what_is_live(
    bus: Bus, sim: SimBackend
) -> None:
    async with collector.sim_cluster_service(bus, tombstones_kept_s=0, prune_every_s=0.05):
        await run_and_delete(bus, sim, [f"w-{i}" for i in range(N)])
        assert await stored(bus) == 1 + N  # the node, and a tombstone per pod
        await watcher_read(bus, await sim.store.last_revision())
        async with asyncio.timeout(30):
            while await stored(bus) > 2:  # noqa: ASYNC110 - the server notifies no one of it
                await asyncio.sleep(0.05)
    # The node, and the revision up to which tombstones went (a resume below it is expired).
    assert [s.key for s in await sim.store.list()] == ["node.n1"]
    assert await sim.store.pruned_up_to() > 0


async def test_a_deletion_the_watcher_has_not_read_stays_for_its_resumed_watch(
    bus: Bus, sim: SimBackend
) -> None:
    async with collector.sim_cluster_service(bus):  # its own pruner: not within the test
        read = await run_and_delete(bus, sim, ["read-0", "read-1"])
        point = await sim.store.last_revision()
        watcher = await watcher_read(bus, point)
        (unread,) = await run_and_delete(bus, sim, ["unread"])
    pods = await bus.kv(bucket_name("local"))

    assert await prune_once(pods, watcher, "local", kept_s=0) == len(read)
    assert await stored(bus) == 1 + 1 + 1  # the node, the one deletion not read, the mark
    assert await sim.store.pruned_up_to() == point
    # The watcher, restarted, resumes from its point and is told of the deletion.
    watch = sim.store.watch("pod.", from_revision=point)
    async with asyncio.timeout(10), contextlib.aclosing(watch) as changes:
        change = await anext(c async for c in changes if c.key == unread)
    assert change.type == "DELETED"


@pytest.mark.parametrize("point", [None, b"", b"not-a-revision", b"-5"])
async def test_without_a_readable_watcher_point_nothing_is_pruned(
    bus: Bus, sim: SimBackend, point: bytes | None
) -> None:
    async with collector.sim_cluster_service(bus):
        await run_and_delete(bus, sim, ["w"])
    watcher = await bus.kv(WATCHER_BUCKET) if point is None else await watcher_read(bus, point)
    pods = await bus.kv(bucket_name("local"))
    assert await prune_once(pods, watcher, "local", kept_s=0) == 0
    assert await stored(bus) == 2
    assert pod_key("ml", "w-main-0") not in {s.key for s in await sim.store.list()}


async def test_a_resume_from_below_pruned_tombstones_is_expired_for_a_reader_that_lists_again(
    bus: Bus, sim: SimBackend
) -> None:
    async with collector.sim_cluster_service(bus):
        await run_and_delete(bus, sim, ["w"])
    point = await sim.store.last_revision()
    pods = await bus.kv(bucket_name("local"))
    assert await prune_once(pods, await watcher_read(bus, point), "local", kept_s=0) == 1

    with pytest.raises(ExpiredError, match=f"deletions up to {point} are forgotten"):
        await anext(sim.store.watch(from_revision=point - 1, expires=True))
    # From the watcher's point, or for a reader that does not list again: resumed as before.
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}
    await sim.apply(node)
    for watch in (
        sim.store.watch(from_revision=point, expires=True),
        sim.store.watch(from_revision=1),
    ):
        async with asyncio.timeout(10), contextlib.aclosing(watch) as changes:
            assert (await anext(c async for c in changes if c.key == "node.n2")).type == "ADDED"
