"""Visibility fencing leftovers (docs/events.md, "Visibility across a move"), on a real
nats-server and read through the gateway: two admission replicas' views written in an order
chosen step by step (each replica reads every event, as replicas do; its renderer and writer
are the service's), so that each race happens exactly as it can in production.

- a LocalQueue whose ClusterQueue does not exist: its status is fenced on its own epoch, so
  the old owner's late write does not stand over the new owner's after a partition move;
- a ClusterQueue moved to another replica's tree and back by two configuration changes
  between two of its owner's renders: its owner writes it again under a new epoch;
- an old owner's page landing after the new owner's first index write: swept.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    config_deleted,
    eventually,
    flavor,
    local_queue,
    publish,
    running,
    start_admission,
    submitted,
    workload,
)
from gateway_helpers import RunningGateway, running_gateway

from muster.admission.fact_reader import fact_of
from muster.admission.state import AdmissionState
from muster.admission.visibility import VisibilityRenderer, pending_page_key
from muster.admission.visibility_writer import LATE_PAGE_SWEEPS, VisibilityWriter
from muster.bus import Bus, BusConfig, new_event
from muster.bus.buckets import VISIBILITY_BUCKET
from muster.bus.kv import Bucket, Entry
from muster.bus.partitions import partition_of, queue_tree, token
from muster.contracts.v1 import events_pb2 as pb
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(90)

SHARDS = 2


class Replica:
    """One admission replica's views: its state fed every event, the service's renderer and
    fenced writer on the real bucket."""

    def __init__(self, kv: Bucket, shard: int, history: list[pb.Envelope]) -> None:
        self.state = AdmissionState(shard=shard, shards=SHARDS, source=f"admission/{shard}")
        for env in history:  # its rebuild
            self.state.replay(fact_of(env), sequence=env.sequence)
        self.state.take_ownership(now_s=0)
        self.views = VisibilityRenderer()
        self.writer = VisibilityWriter(kv, self.views, tombstones_kept_s=600)

    def apply(self, env: pb.Envelope) -> None:
        fact = fact_of(env)
        if fact is not None:
            self.state.apply(fact, now_s=1.0)
        self.state.decide(now_s=1.0)
        self.state.last_sequence = env.sequence

    def render(self) -> tuple[dict[str, bytes], set[str]]:
        state = self.state
        return self.views.render(
            state.engine,
            state.sharding,
            sequence=state.last_sequence,
            moved_at=state.fences,
            trees=state.trees,
        )

    async def write(self) -> None:
        await self.writer.write(*self.render())


class World:
    """MUSTER_EVENTS as a list of numbered envelopes, and the replicas reading it."""

    def __init__(self, kv: Bucket) -> None:
        self.kv = kv
        self.history: list[pb.Envelope] = []
        self.replicas: list[Replica] = []
        self._sequence = itertools.count(1)

    def replica(self, shard: int) -> Replica:
        replica = Replica(self.kv, shard, self.history)
        self.replicas.append(replica)
        return replica

    def event(self, env: pb.Envelope) -> None:
        env.sequence = next(self._sequence)
        self.history.append(env)
        for replica in self.replicas:
            replica.apply(env)


def moved(partition: int, shard: int) -> pb.Envelope:
    """The record moving `partition` to `shard` (`muster.admission.moves`)."""
    changed = pb.PartitionChanged(partition=partition, shard=shard)
    return new_event(
        "partition_changed", changed, cluster="local", source="operator", partition=token(partition)
    )


def cohort_of_shard(shard: int, *, skip: str = "") -> str:
    """A cohort whose tree's partition shard `shard` decides by default."""
    return next(
        name
        for i in range(200)
        if (name := f"team-{i}") != skip and partition_of(f"cohort/{name}") % SHARDS == shard
    )


@pytest.fixture
async def gw(bus: Bus) -> AsyncIterator[RunningGateway]:
    async with running_gateway(bus) as running_gw:
        yield running_gw


async def local_queues(gw: RunningGateway) -> list[tuple[str, str, int]]:
    reply = await gw.visibility.QueueStatus(services_pb2.QueueStatusRequest(), timeout=10)
    return [(q.name, q.cluster_queue, q.pending_workloads) for q in reply.local_queues]


async def pending(gw: RunningGateway, cluster_queue: str) -> list[tuple[str, int]]:
    request = services_pb2.PendingWorkloadsRequest(cluster_queue=cluster_queue, limit=100)
    reply = await gw.visibility.PendingWorkloads(request, timeout=10)
    return [(w.name, w.position_in_cluster_queue) for w in reply.items]


async def test_a_local_queue_of_no_cluster_queue_keeps_its_new_owners_status(
    bus: Bus, gw: RunningGateway
) -> None:
    """Its stand-in tree's partition moves; the old owner's write of before the move lands
    after the new owner's: refused (the stored status carries a newer epoch), and the old
    owner's delete once it reads the move too (not its revision). Unfenced, the gateway showed
    the old owner's count."""
    world = World(await bus.kv(VISIBILITY_BUCKET))
    partition = partition_of(queue_tree("ns", "lost"))
    old = world.replica(partition % SHARDS)
    for manifest in (flavor(), local_queue("lost", cq="missing")):
        world.event(config_applied(manifest))
    await old.write()
    world.event(submitted(workload("a", queue="lost")))
    late = old.render()  # written only after the move
    world.event(moved(partition, 1 - partition % SHARDS))
    new = world.replica(1 - partition % SHARDS)  # rebuilt with the partition
    world.event(submitted(workload("b", queue="lost")))
    await new.write()
    assert await local_queues(gw) == [("lost", "missing", 2)]

    await old.writer.write(*late)
    assert await local_queues(gw) == [("lost", "missing", 2)]
    await old.write()  # it reads the move: the key is no longer its own
    assert await local_queues(gw) == [("lost", "missing", 2)]
    stored = await world.kv.get("lq.ns.lost")
    assert stored is not None
    assert stored.value is not None
    assert pb.LocalQueueStatus.FromString(stored.value).epoch > 0  # in the bucket only


async def test_a_local_queue_that_gains_a_cluster_queue_keeps_its_new_owners_status(
    bus: Bus, gw: RunningGateway
) -> None:
    """Its ClusterQueue is created in a tree another replica decides; the old owner (of its
    stand-in tree) writes its status late, after the new owner's: refused, the stored status
    carrying the ClusterQueue's epoch, larger. Before, the new owner's status carried none,
    and the old owner's count stood until the status next changed."""
    world = World(await bus.kv(VISIBILITY_BUCKET))
    shard = partition_of(queue_tree("ns", "lq")) % SHARDS
    old = world.replica(shard)
    for manifest in (flavor(), local_queue("lq", cq="cq")):
        world.event(config_applied(manifest))
    world.event(submitted(workload("a")))
    await old.write()
    world.event(submitted(workload("b")))
    late = old.render()  # written only after the new owner's
    new = world.replica(1 - shard)
    world.event(config_applied(cluster_queue("cq", cpu="0", cohort=cohort_of_shard(1 - shard))))
    world.event(submitted(workload("c")))
    await new.write()
    assert await local_queues(gw) == [("lq", "cq", 3)]

    await old.writer.write(*late)
    assert await local_queues(gw) == [("lq", "cq", 3)]
    await old.write()  # it reads the ClusterQueue: the key is no longer its own
    assert await local_queues(gw) == [("lq", "cq", 3)]
    world.event(submitted(workload("d")))  # and the new owner keeps writing it
    await new.write()
    assert await local_queues(gw) == [("lq", "cq", 4)]


async def test_a_local_queue_that_loses_its_cluster_queue_keeps_its_new_owners_status(
    bus: Bus, gw: RunningGateway
) -> None:
    """The other way: its ClusterQueue is deleted, and the owner of its stand-in tree writes
    its status; the ClusterQueue's owner writes it late: refused (the stored status carries a
    larger epoch), where before it wrote over it, as over a write of its own former life."""
    world = World(await bus.kv(VISIBILITY_BUCKET))
    shard = partition_of(queue_tree("ns", "lq")) % SHARDS
    new, old = world.replica(shard), world.replica(1 - shard)
    world.event(config_applied(flavor()))
    world.event(config_applied(cluster_queue("cq", cpu="0", cohort=cohort_of_shard(1 - shard))))
    world.event(config_applied(local_queue("lq", cq="cq")))
    world.event(submitted(workload("a")))
    await old.write()
    await new.write()
    world.event(submitted(workload("b")))
    late = old.render()  # written only after the new owner's
    world.event(config_deleted("ClusterQueue", "cq"))
    world.event(submitted(workload("c")))
    await new.write()
    assert await local_queues(gw) == [("lq", "cq", 3)]

    await old.writer.write(*late)
    assert await local_queues(gw) == [("lq", "cq", 3)]
    world.event(submitted(workload("d")))  # and the new owner keeps writing it
    await new.write()
    assert await local_queues(gw) == [("lq", "cq", 4)]


@pytest.mark.parametrize("order", ["the other deletes first", "the owner writes first"])
async def test_a_queue_moved_away_and_back_between_two_renders_is_written_again(
    bus: Bus, gw: RunningGateway, order: str
) -> None:
    """Its cohort changes to one another replica decides, which writes its views (sweeping
    the owner's pages), and back, both before the owner renders again. Keeping its epoch, the
    owner wrote nothing (nothing changed in its eyes: the views stayed gone once the other
    deleted them) or yielded for good (the other's index had a larger epoch)."""
    world = World(await bus.kv(VISIBILITY_BUCKET))
    here, there = cohort_of_shard(0), cohort_of_shard(1)
    owner, other = world.replica(0), world.replica(1)
    world.event(config_applied(flavor()))
    world.event(config_applied(cluster_queue("cq", cpu="0", cohort=here)))
    world.event(config_applied(local_queue("lq", cq="cq")))
    for name in ("a", "b", "c"):
        world.event(submitted(workload(name)))
    await owner.write()
    await other.write()
    assert await pending(gw, "cq") == [("a", 0), ("b", 1), ("c", 2)]

    world.event(config_applied(cluster_queue("cq", cpu="0", cohort=there)))
    await other.write()  # its first write of the queue, under a larger epoch
    assert await pending(gw, "cq") == [("a", 0), ("b", 1), ("c", 2)]
    world.event(config_applied(cluster_queue("cq", cpu="0", cohort=here)))
    if order == "the other deletes first":
        await other.write()
        await owner.write()
    else:
        await owner.write()
        await other.write()
    assert await pending(gw, "cq") == [("a", 0), ("b", 1), ("c", 2)]
    assert await local_queues(gw) == [("lq", "cq", 3)]
    world.event(submitted(workload("d")))  # and it keeps writing it
    await owner.write()
    await other.write()
    assert await pending(gw, "cq") == [("a", 0), ("b", 1), ("c", 2), ("d", 3)]


async def test_a_page_an_old_owner_wrote_late_is_swept(
    bus: Bus, bus_config: BusConfig, gw: RunningGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old owner's page lands after the new owner's first index write swept the older
    epochs' pages, and the old owner is killed before it reads the move: the page is named by
    no index, and the new owner deletes it at its next sweep, quiet as it is."""
    monkeypatch.setattr("muster.admission.service.LATE_PAGES_SWEEP_S", 0.5)
    kv = await bus.kv(VISIBILITY_BUCKET)
    await publish(
        bus,
        config_applied(flavor()),
        config_applied(cluster_queue(cpu="0")),
        config_applied(local_queue()),
        *(submitted(workload(name)) for name in ("a", "b")),
    )
    async with running(await start_admission(bus_config)) as (admission,):
        await admission.wait_serving()

        async def listed() -> bool:
            try:
                return await pending(gw, "cq") == [("a", 0), ("b", 1)]
            except Exception:  # NOT_FOUND until admission's first write
                return False

        await eventually(listed)
        index = await kv.get("pending-index.cq")
        assert index is not None
        epoch = services_pb2.PendingPageIndex.FromString(index.value or b"").epoch
        late = pending_page_key("cq", 0, epoch - 1)
        stale = services_pb2.PendingWorkloadsResponse(total=1)
        stale.items.add(namespace="ns", name="gone", local_queue="lq")
        await kv.put(late, stale.SerializeToString())
        ours = pending_page_key("cq", 1, epoch)  # our epoch: not this sweep's to judge
        await kv.put(ours, b"")
        assert await pending(gw, "cq") == [("a", 0), ("b", 1)]  # named by no index

        async def swept() -> bool:
            return await kv.get(late) is None

        await eventually(swept, timeout_s=20)
        assert await kv.get(ours) is not None
        assert await pending(gw, "cq") == [("a", 0), ("b", 1)]


class Listings:
    """A bucket that notes what each listing asked for and read."""

    def __init__(self, kv: Bucket) -> None:
        self.kv = kv
        self.read: list[tuple[str, list[str]]] = []  # (pattern, keys read)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kv, name)

    async def snapshot(self, pattern: str) -> dict[str, Entry]:
        found = await self.kv.snapshot(pattern)
        self.read.append((pattern, sorted(found)))
        return found


async def test_late_pages_are_looked_for_in_the_queues_a_replica_owns_for_a_while(
    bus: Bus, gw: RunningGateway
) -> None:
    """The sweep lists each of its own queues' pages, not the bucket (another replica's 40
    pages are not read), and only in the LATE_PAGE_SWEEPS sweeps after it claimed the queue:
    after that, an older owner's late page cannot come any more but from one killed since."""
    world = World(await bus.kv(VISIBILITY_BUCKET))
    owner = world.replica(0)
    world.event(config_applied(flavor()))
    world.event(config_applied(cluster_queue("cq", cpu="0", cohort=cohort_of_shard(0))))
    world.event(config_applied(local_queue("lq", cq="cq")))
    world.event(submitted(workload("a")))
    await owner.write()
    for page in range(40):  # another replica's queue's pages
        await world.kv.put(pending_page_key("theirs", page, 7), b"")
    epoch = owner.views.epochs["cq"]
    late = pending_page_key("cq", 0, epoch - 1)
    await world.kv.put(late, b"")
    listings = Listings(world.kv)
    owner.writer.kv = listings

    assert await owner.writer.sweep_late_pages() == 1
    assert listings.read == [
        ("pending-page.*.cq", sorted([pending_page_key("cq", 0, epoch), late]))
    ]
    assert await world.kv.get(late) is None
    for _ in range(LATE_PAGE_SWEEPS - 1):
        assert await owner.writer.sweep_late_pages() == 0
    assert len(listings.read) == LATE_PAGE_SWEEPS
    await world.kv.put(late, b"")  # from an older owner killed long after: left (no index)
    assert await owner.writer.sweep_late_pages() == 0
    assert len(listings.read) == LATE_PAGE_SWEEPS
    assert await pending(gw, "cq") == [("a", 0)]
