"""`muster describe` counts a check's retries as admission does (task evictfix): a queued
workload a check told Retry, stopped (spec.active false) before it was ever evicted, is evicted
by Kueue's workload controller though it holds nothing, and that eviction resets its checks,
counting the Retry (`core.check_retries`). The gateway's book reads the same stream the admission
replica wrote, and shows the same count."""

from __future__ import annotations

from admission_stream import reported, submitted, workload
from snapshot_world import LiveReplica, StoredStream
from test_admission_retry_requeue import checked_queue

from muster.api.model import WorkloadKey
from muster.contracts.v1 import events_pb2 as pb
from muster.gateway.book import WorkloadBook

KEY = WorkloadKey("ns/w")


async def step(stream: StoredStream, replica: LiveReplica, env: pb.Envelope) -> None:
    stream.put(env)
    await replica.catch_up()


def shown(stream: StoredStream) -> tuple[str, str, int]:
    """The check as `muster describe` shows it, from every event stored."""
    book = WorkloadBook()
    for seq in range(1, stream.last + 1):
        book.apply(stream.envelope(seq))
    (entry,) = book
    (c,) = [c for c in entry.describe().conditions if c.type == "AdmissionCheck/prov"]
    return c.reason, c.message, c.retry_count


async def test_stopping_a_queued_workload_told_retry_counts_it_in_admission_and_describe() -> None:
    # 8 cpu in a ClusterQueue of 4: queued, never reserved, never evicted.
    stream, replica, _ = await checked_queue(submitted(workload("w", cpu="8"), at_s=10.0))
    retry = pb.AdmissionCheckUpdated(check="prov", state="Retry")
    await step(stream, replica, reported("admission_check", KEY, retry, at_s=11.0))
    stop = pb.WorkloadActiveChanged(active=False)
    await step(stream, replica, reported("active_changed", KEY, stop, at_s=12.0))

    assert replica.state.engine.records[KEY].retry_counts == {"prov": 1}
    assert replica.state.ledger.entries[KEY].retry_counts == {"prov": 1}
    assert shown(stream) == ("Pending", "Reset to Pending after eviction. Previously: Retry", 1)


async def test_stopping_one_evicted_since_its_reservation_counts_nothing_more() -> None:
    # Reserved, told Retry (evicted: counted once), queued again, told Retry again while it
    # holds nothing, then stopped: already evicted since its reservation, Kueue evicts it no
    # more, and what the check told since stays as it was.
    stream, replica, _ = await checked_queue(submitted(workload("w"), at_s=10.0))
    retry = pb.AdmissionCheckUpdated(check="prov", state="Retry")
    await step(stream, replica, reported("admission_check", KEY, retry, at_s=11.0))
    await step(stream, replica, reported("eviction_completed", KEY, at_s=12.0))
    engine = replica.state.engine
    assert engine.records[KEY].retry_counts == {"prov": 1}
    stop = pb.WorkloadActiveChanged(active=False)
    await step(stream, replica, reported("active_changed", KEY, stop, at_s=13.0))

    assert engine.records[KEY].retry_counts == {"prov": 1}
    assert replica.state.ledger.entries[KEY].retry_counts == {"prov": 1}
    assert shown(stream)[2] == 1


async def test_stopped_resumed_told_retry_and_stopped_again_agrees_with_admission() -> None:
    stream, replica, _ = await checked_queue(submitted(workload("w", cpu="8"), at_s=10.0))
    retry = pb.AdmissionCheckUpdated(check="prov", state="Retry")
    for at_s, active in ((11.0, False), (13.0, True), (15.0, False)):
        await step(stream, replica, reported("admission_check", KEY, retry, at_s=at_s))
        change = pb.WorkloadActiveChanged(active=active)
        await step(stream, replica, reported("active_changed", KEY, change, at_s=at_s + 1))

    count = replica.state.engine.records[KEY].retry_counts.get("prov", 0)
    assert replica.state.ledger.entries[KEY].retry_counts.get("prov", 0) == count
    assert shown(stream)[2] == count
