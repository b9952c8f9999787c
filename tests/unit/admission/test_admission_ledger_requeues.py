"""The PodsReadyTimeout requeue count (Kueue's requeueState.count) as a rebuild restores it:
counted from the evictions the ledger replays, from the stream, from a snapshot, and from a
snapshot of the first layout (version 1: no tags, no decoded workloads), which holds the same
events; reset when the workload is reactivated."""

from __future__ import annotations

import msgspec
import pytest
from admission_stream import (
    applied,
    cluster_queue,
    flavor,
    local_queue,
    reported,
    submitted,
    workload,
)
from snapshot_world import LiveReplica, StoredStream, rebuilt, rebuilt_from

from muster.admission.snapshot import ANY, Snapshot, decode_snapshot, encode_snapshot
from muster.admission.state import AdmissionState
from muster.api.model import KueueConfig, RequeuingStrategy, WaitForPodsReadyConfig, WorkloadKey
from muster.contracts.v1 import events_pb2 as pb

KEY = WorkloadKey("ns/stuck")
# Pods must be ready within 5 s; the back-off after the nth timeout is 10 s * 2^(n-1).
KUEUE = KueueConfig(
    wait_for_pods_ready=WaitForPodsReadyConfig(
        enable=True,
        timeout_seconds=5.0,
        requeuing_strategy=RequeuingStrategy(backoff_base_seconds=10, backoff_max_seconds=1000),
    )
)


async def timed_out_twice() -> tuple[StoredStream, LiveReplica]:
    """`stuck` admitted at 10, timed out at 16, stopped at 17, back at 28 (back-off 10 s from
    the eviction, until 26), timed out again at 34 and stopped at 35: backing off 20 s from
    the eviction (Kueue's requeueAt), until 54. A workload
    submitted to a queue that does not exist (`tickN`) only makes the replica run a round."""
    clock = [10.0]
    stream = StoredStream()
    replica = LiveReplica(stream, clock=clock, kueue=KUEUE)
    for manifest in (flavor(), cluster_queue(cpu="4"), local_queue()):
        stream.put(applied(manifest))
    stream.put(submitted(workload("stuck"), at_s=10.0))
    steps = [(16.0, "tick"), (17.0, "stopped"), (28.0, "tick"), (34.0, "tick"), (35.0, "stopped")]
    for i, (at_s, step) in enumerate(steps):
        await replica.catch_up()
        clock[0] = at_s
        if step == "tick":
            stream.put(submitted(workload(f"tick{i}", queue="nowhere"), at_s=at_s))
        else:
            stream.put(reported("eviction_completed", KEY, at_s=at_s))
    await replica.catch_up()
    return stream, replica


def first_layout(snapshot: Snapshot) -> Snapshot:
    """`snapshot` as a version 1 replica wrote it: the same events, untagged, no workloads."""
    return msgspec.structs.replace(snapshot, version=1, tags=(), workloads=())


def back_off_of(state: AdmissionState) -> tuple[str | None, int, float | None]:
    state.take_ownership(now_s=40.0)
    r = state.engine.records[KEY]
    return state.engine.phase(KEY), r.requeue_count, r.requeue_at_s


async def test_the_live_replica_backs_off_20_s_after_the_second_timeout() -> None:
    _, replica = await timed_out_twice()
    r = replica.state.engine.records[KEY]
    assert (r.requeue_count, r.requeue_at_s) == (2, 54.0)
    assert replica.state.ledger.entries[KEY].requeue_count == 2


@pytest.mark.parametrize("source", ["stream", "snapshot", "first-layout-snapshot", "service"])
async def test_a_rebuilt_replica_counts_on_from_the_evictions_it_replays(source: str) -> None:
    stream, replica = await timed_out_twice()
    snapshot = decode_snapshot(encode_snapshot(replica.snapshot()))
    if source == "first-layout-snapshot":
        snapshot = decode_snapshot(encode_snapshot(first_layout(snapshot)))
        assert (snapshot.version, snapshot.tag_of(0), snapshot.workload_of(0)) == (1, ANY, None)
        source = "snapshot"
    state = await rebuilt_from(source, stream, snapshot, kueue=KUEUE)
    # Not 1 and 44 (10 s after the eviction): the count restarting at 0 shrank the back-off;
    # not 55 (20 s after the stop): the back-off counts from the eviction's recorded time.
    assert back_off_of(state) == ("Backoff", 2, 54.0)


async def test_reactivation_starts_the_count_over_in_the_ledger_as_in_the_engine() -> None:
    stream, replica = await timed_out_twice()
    inactive = pb.WorkloadActiveChanged(active=False)
    for at_s, change in ((36.0, inactive), (37.0, pb.WorkloadActiveChanged(active=True))):
        stream.put(reported("active_changed", KEY, change, at_s=at_s))
        await replica.catch_up()
    assert replica.state.engine.records[KEY].requeue_count == 0
    assert replica.state.ledger.entries[KEY].requeue_count == 0
    state, _ = rebuilt(stream, kueue=KUEUE)
    assert state.ledger.entries[KEY].requeue_count == 0
