"""Fences: what keeps the binder from starting, binding or stopping for the past."""

from __future__ import annotations

import asyncio

from muster.binder.fences import Fences, WorkloadLocks
from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb


def on(cluster: str, field: str, payload: object, sequence: int, key: str = "ns/w") -> pb.Envelope:
    env = new_event(field, payload, cluster=cluster, workload=key, source="t")  # type: ignore[arg-type]
    env.sequence = sequence
    return env


def test_an_admission_before_an_eviction_here_is_stale_and_a_later_one_is_not() -> None:
    fences = Fences(cluster="west")
    assert not fences.stale("ns/w", 2)
    fences.apply(on("west", "evicted", pb.WorkloadEvicted(reason="ClusterLost"), 5))
    assert fences.stale("ns/w", 2)  # delivered after west came back: not started
    assert not fences.stale("ns/w", 9)  # admitted here again since


def test_an_eviction_on_another_cluster_fences_nothing_here() -> None:
    fences = Fences(cluster="west")
    fences.apply(on("east", "evicted", pb.WorkloadEvicted(reason="Preempted"), 5))
    assert not fences.stale("ns/w", 2)


def test_a_finished_workload_keeps_a_tombstone_that_fences_its_old_admissions() -> None:
    fences = Fences(cluster="west")
    fences.apply(on("east", "finished", pb.WorkloadFinished(), 12))
    assert fences.stale("ns/w", 7)  # a redelivered admission of a finished workload
    assert not fences.stale("ns/w", 14)  # deleted and submitted again under the same name


def test_forgotten_tombstones_leave_a_watermark_for_workloads_nobody_knows() -> None:
    # Tombstones are kept for `kept_s` of the stream's time (before: the newest 200 000).
    fences = Fences(cluster="west", kept_s=60.0)
    for seq, (key, at_s) in enumerate((("ns/a", 0.0), ("ns/b", 60.0), ("ns/c", 60.5)), start=10):
        env = on("west", "finished", pb.WorkloadFinished(), seq, key=key)
        env.time_unix_nano = int(at_s * 1e9)
        fences.apply(env)
        assert len(fences) == min(seq - 9, 2)  # ns/a's tombstone went once 60 s had passed
    assert fences.stale("ns/a", 5, known=False)  # older than a forgotten tombstone
    assert not fences.stale("ns/a", 5, known=True)  # its spec is known: live again
    assert not fences.stale("ns/z", 20, known=False)


def test_an_eviction_completed_here_is_done_and_fences_older_admissions() -> None:
    fences = Fences(cluster="west")
    completed = pb.EvictionCompleted(eviction_id="e", eviction_sequence=5)
    fences.apply(on("west", "eviction_completed", completed, 6))
    assert fences.done("ns/w", 5)
    assert not fences.done("ns/w", 8)  # a later eviction is still to do
    assert not fences.done("ns/w", 0)  # an unnamed one is always done again
    assert fences.stale("ns/w", 3)


async def test_workload_locks_run_one_workload_at_a_time_and_forget_idle_keys() -> None:
    locks = WorkloadLocks()
    order: list[str] = []

    async def hold(key: str, name: str, release: asyncio.Event | None = None) -> None:
        async with locks.hold(key):
            order.append(f"{name}+")
            if release is not None:
                await release.wait()
            order.append(f"{name}-")

    release = asyncio.Event()
    first = asyncio.create_task(hold("ns/w", "start", release))
    await asyncio.sleep(0)
    second = asyncio.create_task(hold("ns/w", "stop"))
    other = asyncio.create_task(hold("ns/x", "other"))
    await other
    assert order == ["start+", "other+", "other-"]  # another workload does not wait
    release.set()
    await asyncio.gather(first, second)
    assert order[3:] == ["start-", "stop+", "stop-"]
    assert len(locks) == 0
