"""A check's Retry and a PodsReady timeout that overlap, as Kueue decides them: requeueAt only
moves later (SetRequeueState), a Retry counts nothing, and requeueState is cleared when the
workload is deactivated. The live replica, a rebuilt one and the watcher's Workload status read
one stored stream and agree (`core.requeue_state` is the rule all three use)."""

from __future__ import annotations

from typing import Any

import pytest
from admission_stream import applied, cluster_queue, flavor, local_queue, reported, submitted
from admission_stream import workload as workload_manifest
from snapshot_world import LiveReplica, StoredStream, rebuilt_from

from muster.admission.snapshot import decode_snapshot, encode_snapshot
from muster.api.check_states import format_time
from muster.api.model import KueueConfig, RequeuingStrategy, WaitForPodsReadyConfig, WorkloadKey
from muster.cluster.kube import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.kueue_status.book import StatusBook

KEY = WorkloadKey("ns/w")
WORKLOAD = ObjectRef(kind="Workload", namespace="ns", name="w")
REQUEUING = RequeuingStrategy(backoff_base_seconds=10, backoff_max_seconds=1000)
# Pods must be ready within 5 s of admission; the back-off after the nth timeout: 10 s*2^(n-1).
KUEUE = KueueConfig(
    wait_for_pods_ready=WaitForPodsReadyConfig(
        enable=True, timeout_seconds=5.0, requeuing_strategy=REQUEUING
    )
)
CHECK = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "AdmissionCheck",
    "metadata": {"name": "prov"},
    "spec": {"controllerName": "example.com/prov"},
}
# Admitted at 10.5 (prov Ready), timed out at 16: back-off until 26. The check enters Retry at
# 16 s (its lastTransitionTime), told at 17 s, while the pods stop (gone at 18 s).
TIMED_OUT_S, BACKOFF_END_S, RETRY_S, TOLD_S, STOPPED_S = 16.0, 26.0, 16.0, 17.0, 18.0


class World:
    """One stored stream, the live replica consuming it, on a clock the test moves."""

    def __init__(self) -> None:
        self.clock = [10.0]
        self.stream = StoredStream()
        self.replica = LiveReplica(self.stream, clock=self.clock, kueue=KUEUE)

    async def at(self, at_s: float, env: pb.Envelope | None = None) -> None:
        """At `at_s`, `env` is stored (else a workload for no queue: the replica only runs a
        round, its timers firing), and the replica consumes it."""
        self.clock[0] = at_s
        tick = submitted(workload_manifest(f"tick{at_s}", queue="nowhere"), at_s=at_s)
        self.stream.put(env if env is not None else tick)
        await self.replica.catch_up()

    def requeued(self) -> list[tuple[float, str]]:
        """(time, reason) of each `requeued` stored about `w`."""
        envelopes = map(self.stream.envelope, range(1, self.stream.last + 1))
        return [(e.time_unix_nano / 1e9, e.requeued.reason) for e in envelopes if e.requeued.reason]

    def requeue_state(self) -> dict[str, Any] | None:
        """status.requeueState as the watcher writes it from the stored stream."""
        book = StatusBook(pods_ready=True, requeuing=REQUEUING)
        for seq in range(1, self.stream.last + 1):
            book.apply(self.stream.envelope(seq))
        found: dict[str, Any] | None = (book.status_of(WORKLOAD) or {}).get("requeueState")
        return found


def check(
    state: str, *, after_s: int = 0, since_s: float = 0.0, name: str = "prov"
) -> pb.AdmissionCheckUpdated:
    return pb.AdmissionCheckUpdated(
        check=name,
        state=state,
        requeue_after_seconds=after_s,
        transitioned_unix_nano=int(since_s * 1e9),
    )


async def admitted() -> World:
    """`w` reserved at 10 in a ClusterQueue requiring prov, admitted at 10.5 (prov Ready)."""
    world = World()
    with_check = cluster_queue()
    with_check["spec"]["admissionChecks"] = ["prov"]
    for manifest in (flavor(), CHECK, with_check, local_queue()):
        world.stream.put(applied(manifest))
    await world.at(10.0, submitted(workload_manifest("w"), at_s=10.0))
    await world.at(10.5, reported("admission_check", KEY, check("Ready"), at_s=10.5))
    return world


async def timed_out() -> World:
    """`admitted`, its pods never ready: evicted (PodsReadyTimeout) at 16, its pods stopping."""
    world = await admitted()
    await world.at(TIMED_OUT_S)
    assert world.replica.state.engine.phase(KEY) == "Evicting"
    return world


async def overlapped(after_s: int) -> World:
    """`timed_out`, then prov says Retry (requeueAfterSeconds `after_s`) while its pods stop."""
    world = await timed_out()
    retry = check("Retry", after_s=after_s, since_s=RETRY_S)
    await world.at(TOLD_S, reported("admission_check", KEY, retry, at_s=TOLD_S))
    (evicted,) = [
        e for e in map(world.stream.envelope, range(1, world.stream.last + 1)) if e.evicted.reason
    ]
    done = pb.EvictionCompleted(eviction_id=evicted.event_id)
    await world.at(STOPPED_S, reported("eviction_completed", KEY, done, at_s=STOPPED_S))
    return world


# A Retry ending after the back-off pushes requeueAt out to its end (16 + 60); one ending
# before it (16 + 3) leaves the back-off's end: requeueAt never moves earlier.
LATER, SOONER = (60, RETRY_S + 60), (3, BACKOFF_END_S)


@pytest.mark.parametrize(("after_s", "requeue_at_s"), [LATER, SOONER], ids=["later", "sooner"])
async def test_the_later_of_the_back_off_and_the_retry_is_waited_for(
    after_s: int, requeue_at_s: float
) -> None:
    world = await overlapped(after_s)
    for tick_s in sorted({BACKOFF_END_S, requeue_at_s - 0.5, requeue_at_s}):
        await world.at(tick_s)
    assert world.requeued() == [(requeue_at_s, "BackoffFinished")]


@pytest.mark.parametrize(("after_s", "requeue_at_s"), [LATER, SOONER], ids=["later", "sooner"])
async def test_the_watcher_writes_the_instant_admission_waits_for_counting_one_timeout(
    after_s: int, requeue_at_s: float
) -> None:
    world = await overlapped(after_s)
    engine, ledger = world.replica.state.engine, world.replica.state.ledger
    assert (engine.phase(KEY), engine.records[KEY].requeue_at_s) == ("Backoff", requeue_at_s)
    # The Retry evicts nothing more and counts nothing: one PodsReady timeout, everywhere.
    assert (engine.records[KEY].requeue_count, ledger.entries[KEY].requeue_count) == (1, 1)
    assert world.requeue_state() == {"count": 1, "requeueAt": format_time(requeue_at_s)}


@pytest.mark.parametrize("source", ["stream", "snapshot", "service"])
async def test_a_rebuilt_replica_waits_for_the_later_end_too(source: str) -> None:
    world = await overlapped(LATER[0])
    snapshot = decode_snapshot(encode_snapshot(world.replica.snapshot()))
    state = await rebuilt_from(source, world.stream, snapshot, kueue=KUEUE)
    assert state.take_ownership(now_s=30.0) == []  # not requeued at the back-off's end
    record = state.engine.records[KEY]
    assert (state.engine.phase(KEY), record.requeue_count, record.requeue_at_s) == (
        "Backoff",
        1,
        LATER[1],
    )


async def test_deactivation_clears_the_count_for_admission_and_the_watcher_alike() -> None:
    """Kueue's workload controller drops requeueState when the workload is deactivated: while
    it is, the ledger (what a rebuild hands the engine), the engine and the watcher all say
    no count; reactivated, it counts from zero."""
    world = await timed_out()
    await world.at(STOPPED_S, reported("eviction_completed", KEY, at_s=STOPPED_S))
    stop = pb.WorkloadActiveChanged(active=False)
    await world.at(20.0, reported("active_changed", KEY, stop, at_s=20.0))
    engine, ledger = world.replica.state.engine, world.replica.state.ledger
    assert (engine.records[KEY].requeue_count, ledger.entries[KEY].requeue_count) == (0, 0)
    assert world.requeue_state() is None
