"""Visibility values: ClusterQueue and LocalQueue statuses, pending lists, coalesced writes."""

from __future__ import annotations

import pytest
from admission_stream import (
    Stream,
    applied,
    cluster_queue,
    flavor,
    local_queue,
    submitted,
    workload,
)
from memory_kv import MemoryKV

from muster.admission.homes import HomesOut
from muster.admission.shards import PartitionMap, Sharding
from muster.admission.state import AdmissionState
from muster.admission.visibility import (
    VisibilityPace,
    VisibilityRenderer,
    cluster_queue_status,
    local_queue_status,
    pending_workloads,
    visibility_values,
)
from muster.admission.visibility_writer import VisibilityWriter, page_epoch
from muster.bus.partitions import partition_of
from muster.contracts.v1 import events_pb2 as pb
from muster.contracts.v1 import services_pb2
from muster.gateway.visibility import pending_workloads as gateway_pending


def busy_state() -> AdmissionState:
    stream, state = Stream(), AdmissionState()
    state.take_ownership(now_s=0)
    limited = cluster_queue(cpu="4", cohort="team")
    limited["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = "1"
    for manifest in (
        flavor(),
        limited,
        cluster_queue("other", cpu="2", cohort="team"),
        local_queue(),
    ):
        stream.run(state, applied(manifest))
    for name, cpu in (("a", "2500m"), ("b", "2"), ("c", "1")):
        stream.run(state, submitted(workload(name, cpu=cpu)))
    return state


def test_cluster_queue_status_has_counts_and_quantities_per_flavor_and_resource() -> None:
    status = cluster_queue_status(busy_state().engine, "cq")
    assert (status.name, status.cohort, status.active) == ("cq", "team", True)
    assert (status.pending_workloads, status.reserving_workloads, status.admitted_workloads) == (
        1,
        2,
        2,
    )
    (flavor_status,) = status.flavors
    (cpu,) = flavor_status.resources
    assert (flavor_status.name, cpu.name) == ("default", "cpu")
    assert (cpu.nominal, cpu.borrowing_limit, cpu.reserved, cpu.used, cpu.borrowed) == (
        "4", "1", "4500m", "4500m", "500m"
    )  # fmt: skip
    assert cpu.available == "500m"
    other = cluster_queue_status(busy_state().engine, "other").flavors[0].resources[0]
    assert other.borrowing_limit == ""


def test_local_queue_status_and_pending_list() -> None:
    engine = busy_state().engine
    lq = local_queue_status(engine, "ns", "lq")
    assert (lq.cluster_queue, lq.pending_workloads, lq.admitted_workloads) == ("cq", 1, 2)
    assert [(r.name, r.reserved, r.used) for r in lq.flavors[0].resources] == [
        ("cpu", "4500m", "4500m")
    ]
    pending = pending_workloads(engine, "cq")
    assert pending.total == 1
    assert [
        (p.namespace, p.name, p.local_queue, p.position_in_cluster_queue) for p in pending.items
    ] == [("ns", "c", "lq", 0)]


def test_values_cover_the_owned_queues_under_their_keys() -> None:
    state = busy_state()
    values = visibility_values(state.engine, state.sharding)
    index = services_pb2.PendingPageIndex.FromString(values["pending-index.cq"])
    (page_id,) = [p.id for p in index.pages]
    assert sorted(values) == [
        "cq.cq", "cq.other", "lq.ns.lq", "pending-index.cq", "pending-index.other",
        f"pending-page.1-{page_id}.cq",
    ]  # fmt: skip
    assert index.epoch == 1  # owned since the first event: the stream's sequences start at 1
    assert pb.ClusterQueueStatus.FromString(values["cq.cq"]).name == "cq"
    assert [(p.count, [(q.namespace, q.name, q.count) for q in p.local_queues])
            for p in index.pages] == [(1, [("ns", "lq", 1)])]  # fmt: skip
    page = services_pb2.PendingWorkloadsResponse.FromString(values[f"pending-page.1-{page_id}.cq"])
    assert [(p.namespace, p.name, p.local_queue, p.cluster_queue) for p in page.items] == [
        ("ns", "c", "lq", "")  # the key names the ClusterQueue; the reader counts positions
    ]
    assert not services_pb2.PendingPageIndex.FromString(values["pending-index.other"]).pages


async def test_writer_writes_only_changes_and_deletes_vanished_keys() -> None:
    kv = MemoryKV()
    writer = VisibilityWriter(kv)
    assert await writer.write({"cq.a": b"1", "cq.b": b"2"}) == ["cq.a", "cq.b"]
    assert await writer.write({"cq.a": b"1", "cq.b": b"3"}) == ["cq.b"]
    assert await writer.write({"cq.b": b"3"}) == []
    assert kv.writes == ["cq.a", "cq.b", "cq.b", "-cq.a"]
    assert kv.data == {"cq.b": b"3"}


class FlakyKV(MemoryKV):
    """Refuses writes of the keys in `failing`."""

    def __init__(self, *failing: str) -> None:
        super().__init__()
        self.failing = set(failing)

    async def put(self, key: str, value: bytes) -> int:
        if key in self.failing:
            raise TimeoutError(f"no answer for {key}")
        return await super().put(key, value)


async def test_a_key_whose_write_failed_is_written_on_the_next_call() -> None:
    kv = FlakyKV("cq.b")
    writer = VisibilityWriter(kv)
    with pytest.raises(TimeoutError):
        await writer.write({"cq.a": b"1", "cq.b": b"2"})
    assert kv.data == {"cq.a": b"1"}  # the other write went through all the same
    kv.failing.clear()
    assert await writer.write({"cq.a": b"1", "cq.b": b"2"}) == ["cq.b"]


async def test_pages_are_put_before_their_index_and_deletions_come_last() -> None:
    """A reader never finds an index naming a page not yet written, or already deleted."""
    kv = MemoryKV()
    writer = VisibilityWriter(kv)
    await writer.write({"pending-page.0.q": b"old"})
    values = {"pending-index.q": b"i", "pending-page.1.q": b"p", "cq.q": b"s"}
    await writer.write(values)
    assert kv.writes[1:] == ["pending-page.1.q", "cq.q", "pending-index.q", "-pending-page.0.q"]


async def test_told_the_changed_keys_the_writer_looks_at_them_and_at_what_failed_only() -> None:
    kv = FlakyKV()
    writer = VisibilityWriter(kv)
    values = {"cq.a": b"1", "cq.b": b"2", "cq.c": b"3"}
    await writer.write(values, set(values))
    kv.failing.add("cq.b")
    values |= {"cq.a": b"5", "cq.b": b"6"}
    with pytest.raises(TimeoutError):
        await writer.write(values, {"cq.a", "cq.b"})
    kv.failing.clear()
    values["cq.c"] = b"7"  # not named: the writer does not look
    assert await writer.write(values, set()) == ["cq.b"]
    del values["cq.a"]
    assert await writer.write(values, {"cq.a"}) == []
    assert kv.data == {"cq.b": b"6", "cq.c": b"3"}


def test_a_render_after_one_arrival_renders_that_queue_only() -> None:
    state = busy_state()
    renderer = VisibilityRenderer()
    values, changed = renderer.render(state.engine, state.sharding)
    assert changed == set(values)  # the first render: everything
    Stream().run(state, submitted(workload("d", cpu="1")))
    values, changed = renderer.render(state.engine, state.sharding)
    (page,) = state.engine.pending_pages("cq")
    assert changed == {"cq.cq", "lq.ns.lq", f"pending-page.1-{page.id}.cq", "pending-index.cq"}
    assert values == visibility_values(state.engine, state.sharding)


def test_a_partition_record_that_moves_none_of_ours_renders_nothing_again() -> None:
    state = busy_state()
    renderer = VisibilityRenderer()
    renderer.render(state.engine, state.sharding)
    assert not state.sharding.refresh()  # a partition record moving another shard's partition
    assert renderer.render(state.engine, state.sharding)[1] == set()


def test_pace_rests_little_after_one_round_and_backs_off_under_a_stream() -> None:
    pace = VisibilityPace(quiet_s=0.1, busy_s=1.0, cpu_share=20)
    # one kubectl apply: the next shows soon
    assert pace.rest_s(rounds=1, waited=True, spent_s=0.0) == 0.1
    # A stream of rounds: each write found several rounds' changes waiting.
    rests = [pace.rest_s(rounds=12, waited=False, spent_s=0.0) for _ in range(6)]
    assert rests == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert pace.rest_s(rounds=1, waited=True, spent_s=0.0) == 0.1  # quiet again: prompt again
    assert pace.rest_s(rounds=0, waited=False, spent_s=0.0) == 0.1  # a retry after a failure


def test_pace_backs_off_for_one_round_per_rest_that_came_while_resting() -> None:
    # One of four replicas under a stream: a round or two between writes, but one came during
    # each rest: a stream as a lone replica's dozen is, not a quiet engine.
    pace = VisibilityPace(quiet_s=0.1, busy_s=1.0, cpu_share=20)
    rests = [pace.rest_s(rounds=1, waited=False, spent_s=0.0) for _ in range(5)]
    assert rests == [0.2, 0.4, 0.8, 1.0, 1.0]


def test_pace_gives_the_views_at_most_their_share_of_the_time() -> None:
    pace = VisibilityPace(quiet_s=0.1, busy_s=1.0, cpu_share=20)
    assert pace.rest_s(rounds=1, waited=True, spent_s=0.2) == pytest.approx(
        4.0
    )  # 200 ms of views: 4 s apart


def test_pace_refuses_a_quiet_rest_longer_than_the_busy_one() -> None:
    with pytest.raises(ValueError, match="quiet"):
        VisibilityPace(quiet_s=2.0, busy_s=1.0, cpu_share=20)


async def test_an_old_owner_writes_nothing_over_a_newer_owners_views_and_deletes_none() -> None:
    """A tree moved: the old owner (epoch 5) writes after the new one (epoch 10) and then drops
    the queues; what readers find stays the new owner's (docs/events.md, "Visibility across
    a move")."""
    kv, state = MemoryKV(), busy_state()
    old_views, new_views = VisibilityRenderer(), VisibilityRenderer()
    old, new = VisibilityWriter(kv, old_views), VisibilityWriter(kv, new_views)
    await old.write(*old_views.render(state.engine, state.sharding, sequence=4))
    Stream().run(state, submitted(workload("d", cpu="1")))  # read by both, after the move
    late = old_views.render(state.engine, state.sharding, sequence=12)  # written late
    await new.write(*new_views.render(state.engine, state.sharding, sequence=9))
    theirs = dict(kv.data)
    assert all(k.startswith("pending-page.10-") for k in theirs if "page" in k)  # old ones swept

    await old.write(*late)
    assert old.superseded == {("cq", 5)}
    assert kv.data == theirs  # its pages were put, then deleted: no index names them
    await old.write({})  # it reads the move: its queues are no longer its own
    assert kv.data == theirs
    request = services_pb2.PendingWorkloadsRequest(cluster_queue="cq")
    found = await gateway_pending(kv, request)
    assert [(w.name, w.position_in_cluster_queue) for w in found.items] == [("c", 0), ("d", 1)]


async def test_a_newer_owners_status_is_not_written_over_by_an_older_owners_first_write() -> None:
    kv, state = MemoryKV(), busy_state()
    old_views, new_views = VisibilityRenderer(), VisibilityRenderer()
    old, new = VisibilityWriter(kv, old_views), VisibilityWriter(kv, new_views)
    values, _ = old_views.render(state.engine, state.sharding, sequence=4)
    await new.write(*new_views.render(state.engine, state.sharding, sequence=9))
    theirs = dict(kv.data)
    # The old owner's first write in its life comes late: every key is new to it.
    assert await old.write({k: v + b"\x00" for k, v in values.items()}) == []
    assert kv.data == theirs


# The MUSTER_PARTITIONS values a replica owes: after a configuration change moved a
# LocalQueue's home, not at every views write (they cover every LocalQueue of every shard).


def one_local_queue() -> tuple[Stream, AdmissionState]:
    stream, state = Stream(), AdmissionState()
    state.take_ownership(now_s=0)
    for manifest in (flavor(), cluster_queue(), local_queue("a")):
        stream.run(state, applied(manifest))
    return stream, state


def test_homes_are_owed_after_a_configuration_change_only_until_written() -> None:
    stream, state = one_local_queue()
    out = HomesOut()
    first = out.owed(state.homes)
    assert first is not None
    assert list(first) == ["lq.ns.a"]
    out.written(state.homes.version)
    assert out.owed(state.homes) is None

    stream.run(state, submitted(workload("w", queue="a")))
    stream.run(state, applied(cluster_queue(cpu="8")))  # quota only: no LocalQueue moved
    assert out.owed(state.homes) is None

    stream.run(state, applied(local_queue("b")))
    owed = out.owed(state.homes)
    assert owed is not None
    assert sorted(owed) == ["lq.ns.a", "lq.ns.b"]


def test_homes_whose_write_failed_stay_owed() -> None:
    _, state = one_local_queue()
    out = HomesOut()
    version = state.homes.version
    assert out.owed(state.homes) is not None
    # The write failed: `written` is not called, so the next views write tries again.
    assert out.owed(state.homes) is not None
    out.written(version)
    assert out.owed(state.homes) is None


def resharded(state: AdmissionState) -> Sharding:
    """The same ownership as a new object: what a replica holds after partition records."""
    return Sharding(state.engine, shard=0, partitions=PartitionMap(shards=1))


async def test_a_queue_that_left_and_came_back_writes_again_under_a_newer_epoch() -> None:
    """Its partition moved to another replica, which wrote it (epoch 10), and back (records at
    sequences 8 and 15) between two of this replica's renders: it owns the queue under a new
    epoch and writes it, instead of yielding for good to an owner that left."""
    kv, state = MemoryKV(), busy_state()
    here_views, there_views = VisibilityRenderer(), VisibilityRenderer()
    here, there = VisibilityWriter(kv, here_views), VisibilityWriter(kv, there_views)
    await here.write(*here_views.render(state.engine, state.sharding, sequence=4))
    await there.write(*there_views.render(state.engine, state.sharding, sequence=9))
    Stream().run(state, submitted(workload("d", cpu="1")))
    partition = partition_of(state.engine.tree_of_cluster_queue("cq") or "")
    back = here_views.render(state.engine, resharded(state), sequence=16, moved_at={partition: 15})
    assert here_views.epochs["cq"] == 17
    await here.write(*back)
    assert ("cq", 17) not in here.superseded
    index = services_pb2.PendingPageIndex.FromString(kv.data["pending-index.cq"])
    assert index.epoch == 17
    assert not [k for k in kv.data if k.startswith("pending-page.10-")]  # the other's, swept
    request = services_pb2.PendingWorkloadsRequest(cluster_queue="cq")
    found = await gateway_pending(kv, request)
    assert [(w.name, w.position_in_cluster_queue) for w in found.items] == [("c", 0), ("d", 1)]


def test_a_queue_whose_partition_did_not_move_keeps_its_epoch_and_page_keys() -> None:
    state = busy_state()
    views = VisibilityRenderer()
    first, _ = views.render(state.engine, state.sharding, sequence=4)
    pages = sorted(k for k in first if k.startswith("pending-page."))
    partition = partition_of(state.engine.tree_of_cluster_queue("cq") or "")
    again, _ = views.render(state.engine, resharded(state), sequence=16, moved_at={partition: 3})
    assert views.epochs["cq"] == 5
    assert sorted(k for k in again if k.startswith("pending-page.")) == pages


async def test_a_first_index_write_sweeps_a_killed_lifes_orphan_page_of_its_own_epoch() -> None:
    """A life killed between a page and its index left `pending-page.5-99.cq`, named by no
    index; the next life has the same epoch (nothing applied in between). A newer owner's
    page is left to that owner."""
    kv, state = MemoryKV(), busy_state()
    await kv.put("pending-page.5-99.cq", b"orphan")
    await kv.put("pending-page.3-0.cq", b"older owner's")
    await kv.put("pending-page.12-0.cq", b"newer owner's, its index not yet written")
    views = VisibilityRenderer()
    writer = VisibilityWriter(kv, views, tombstones_kept_s=600)
    await writer.write(*views.render(state.engine, state.sharding, sequence=4))
    pages = sorted(k for k in kv.data if k.startswith("pending-page."))
    index = services_pb2.PendingPageIndex.FromString(kv.data["pending-index.cq"])
    assert pages == sorted(
        [*(f"pending-page.5-{p.id}.cq" for p in index.pages), "pending-page.12-0.cq"]
    )
    assert kv.forgotten == {"pending-page.5-99.cq", "pending-page.3-0.cq"}  # tombstones expire


@pytest.mark.parametrize(
    ("key", "epoch"),
    [("pending-page.12-3.cq", 12), ("pending-page.3.cq", 0), ("pending-page.7-1.a.b", 7)],
)
def test_page_epoch_reads_the_key_of_either_layout(key: str, epoch: int) -> None:
    assert page_epoch(key) == epoch
