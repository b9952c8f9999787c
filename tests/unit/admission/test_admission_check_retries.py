"""A check's retry count (Kueue's status.admissionChecks[].retryCount, task checks3): one more
at each eviction that found the check in Retry, started over by one that found it Ready or
Rejected (pkg/workload/evict resetChecksOnEviction). The live replica's engine, its ledger and a
replica rebuilt from the stream, a snapshot or both agree, and the workload's status shows it."""

from __future__ import annotations

import pytest
from admission_stream import reported, submitted, workload
from snapshot_world import LiveReplica, StoredStream, rebuilt_from
from test_admission_retry_requeue import checked_queue

from muster.admission.snapshot import decode_snapshot, encode_snapshot
from muster.admission.state import AdmissionState
from muster.api.model import AdmissionCheckState, WorkloadKey
from muster.contracts.v1 import events_pb2 as pb

KEY = WorkloadKey("ns/w")


def told(state: str, *, at_s: float) -> pb.Envelope:
    return reported("admission_check", KEY, pb.AdmissionCheckUpdated(check="prov", state=state),
                    at_s=at_s)  # fmt: skip


async def retried_twice() -> tuple[StoredStream, LiveReplica, list[float]]:
    """`w` reserved at 10 in a ClusterQueue requiring prov; prov says Retry at 11 and 13, each
    evicting it (its pods gone at 12 and 14): reserved a third time, prov Pending."""
    stream, replica, clock = await checked_queue(submitted(workload("w"), at_s=10.0))
    for at_s in (11.0, 13.0):
        await step(stream, replica, clock, told("Retry", at_s=at_s))
        await step(stream, replica, clock, reported("eviction_completed", KEY, at_s=at_s + 1))
    return stream, replica, clock


async def step(
    stream: StoredStream, replica: LiveReplica, clock: list[float], env: pb.Envelope
) -> None:
    clock[0] = env.time_unix_nano / 1e9
    stream.put(env)
    await replica.catch_up()


def checks_of(state: AdmissionState) -> tuple[AdmissionCheckState, ...]:
    return state.engine.workload(KEY).admission_checks


async def test_each_eviction_by_a_retry_counts_one_in_the_engine_and_the_ledger() -> None:
    _, replica, _ = await retried_twice()
    assert replica.state.engine.phase(KEY) == "QuotaReserved"
    assert checks_of(replica.state) == (
        AdmissionCheckState(name="prov", state="Pending", retry_count=2),
    )
    assert replica.state.ledger.entries[KEY].retry_counts == {"prov": 2}


@pytest.mark.parametrize("source", ["stream", "snapshot", "service"])
async def test_a_rebuilt_replica_counts_on_from_the_retries_it_replays(source: str) -> None:
    stream, replica, _ = await retried_twice()
    snapshot = decode_snapshot(encode_snapshot(replica.snapshot()))
    state = await rebuilt_from(source, stream, snapshot)
    state.take_ownership(now_s=15.0)
    assert state.ledger.entries[KEY].retry_counts == {"prov": 2}
    assert checks_of(state) == checks_of(replica.state)


async def test_an_eviction_that_finds_the_check_ready_starts_the_count_over() -> None:
    stream, replica, clock = await retried_twice()
    await step(stream, replica, clock, told("Ready", at_s=15.0))
    assert replica.state.engine.phase(KEY) == "Admitted"
    inactive = pb.WorkloadActiveChanged(active=False)
    await step(stream, replica, clock, reported("active_changed", KEY, inactive, at_s=16.0))
    assert replica.state.engine.records[KEY].retry_counts == {}
    assert replica.state.ledger.entries[KEY].retry_counts == {}
