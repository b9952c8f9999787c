"""A check's Retry with requeueAfterSeconds, as Kueue's workload controller waits it out: from
the check's own event (its lastTransitionTime), in whole seconds (requeueState.requeueAt is a
metav1.Time), and not before the evicted workload's pods are gone. A replica rebuilt from the
stream or a snapshot waits until the same instant as the live one."""

from __future__ import annotations

import pytest
from admission_stream import (
    KUEUE,
    applied,
    cluster_queue,
    flavor,
    local_queue,
    reported,
    submitted,
    workload,
)
from snapshot_world import LiveReplica, StoredStream, rebuilt, rebuilt_from

from muster.admission.snapshot import decode_snapshot, encode_snapshot
from muster.admission.state import AdmissionState
from muster.api.model import WorkloadKey
from muster.contracts.v1 import events_pb2 as pb

KEY = WorkloadKey("ns/w")
CHECK = {
    "apiVersion": KUEUE,
    "kind": "AdmissionCheck",
    "metadata": {"name": "prov"},
    "spec": {"controllerName": "example.com/prov"},
}
# The check says Retry at 12.7 s (its event's time), the replica gets to it at 13.4 s:
# requeueAt is 12.7 + 30 = 42.7 as Kueue computes it, 42 s as it is written and waited for.
RETRY_S, HANDLED_S, AFTER_S, REQUEUE_AT_S = 12.7, 13.4, 30, 42.0


async def checked_queue(*arrivals: pb.Envelope) -> tuple[StoredStream, LiveReplica, list[float]]:
    """A replica at 10 s that has read ClusterQueue cq (4 cpu, requiring check prov), its
    LocalQueue, then `arrivals`."""
    clock = [10.0]
    stream = StoredStream()
    replica = LiveReplica(stream, clock=clock)
    with_check = cluster_queue()
    with_check["spec"]["admissionChecks"] = ["prov"]
    for manifest in (flavor(), CHECK, with_check, local_queue()):
        stream.put(applied(manifest))
    for arrival in arrivals:
        stream.put(arrival)
    await replica.catch_up()
    return stream, replica, clock


async def told_retry(*, echoed: bool = True) -> tuple[StoredStream, LiveReplica, list[float]]:
    """`w` reserved at 10 s in a ClusterQueue requiring check prov; prov answers Retry (30 s),
    which evicts it (the replica reads its `evicted` back unless not `echoed`)."""
    stream, replica, clock = await checked_queue(submitted(workload("w"), at_s=10.0))
    clock[0] = HANDLED_S
    retry = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=AFTER_S)
    stream.put(reported("admission_check", KEY, retry, at_s=RETRY_S))
    await (replica.catch_up() if echoed else replica.consume(1))
    return stream, replica, clock


async def retried(*, stopped_s: float) -> tuple[StoredStream, LiveReplica, list[float]]:
    """As `told_retry`; its pods are gone at `stopped_s`."""
    stream, replica, clock = await told_retry()
    (evicted,) = [e for e in map(stream.envelope, range(1, stream.last + 1)) if e.evicted.reason]
    clock[0] = stopped_s
    done = pb.EvictionCompleted(eviction_id=evicted.event_id)
    stream.put(reported("eviction_completed", KEY, done, at_s=stopped_s))
    await replica.catch_up()
    return stream, replica, clock


def requeued_at(stream: StoredStream) -> list[tuple[float, str]]:
    """(time, reason) of each `requeued` stored about `w`."""
    envelopes = map(stream.envelope, range(1, stream.last + 1))
    return [(e.time_unix_nano / 1e9, e.requeued.reason) for e in envelopes if e.requeued.reason]


async def test_the_live_replica_waits_from_the_checks_event_in_whole_seconds() -> None:
    stream, replica, clock = await retried(stopped_s=15.0)
    engine = replica.state.engine
    assert (engine.phase(KEY), engine.records[KEY].requeue_at_s) == ("Backoff", REQUEUE_AT_S)
    for tick_s in (41.9, REQUEUE_AT_S):  # not requeued before the instant written
        clock[0] = tick_s
        stream.put(submitted(workload(f"tick{tick_s}", queue="nowhere"), at_s=tick_s))
        await replica.catch_up()
    assert requeued_at(stream) == [(REQUEUE_AT_S, "BackoffFinished")]


async def test_its_wait_over_before_its_pods_are_gone_it_queues_once_they_are() -> None:
    stream, replica, _ = await retried(stopped_s=50.0)
    assert requeued_at(stream) == [(50.0, "BackoffFinished")]
    assert replica.state.engine.phase(KEY) != "Backoff"


@pytest.mark.parametrize("source", ["stream", "snapshot", "service"])
async def test_a_rebuilt_replica_waits_until_the_same_instant(source: str) -> None:
    stream, replica, _ = await retried(stopped_s=15.0)
    snapshot = decode_snapshot(encode_snapshot(replica.snapshot()))
    state = await rebuilt_from(source, stream, snapshot)
    # Not requeued at once (its Retry forgotten), nor 30 s from when the replica read it.
    assert state.take_ownership(now_s=20.0) == []
    assert (state.engine.phase(KEY), state.engine.records[KEY].requeue_at_s) == (
        "Backoff",
        REQUEUE_AT_S,
    )


async def test_a_requeue_decided_but_not_stored_is_said_by_the_rebuilt_replica() -> None:
    """Its wait over when its pods were gone, the replica requeued it then, and stopped before
    its `requeued` was stored: the successor says it, so the Workload's Requeued turns True."""
    stream, _, _ = await retried(stopped_s=50.0)
    fields = [stream.envelope(seq).WhichOneof("payload") for seq in range(1, stream.last + 1)]
    del stream.data[fields.index("eviction_completed") + 1 :]  # what it published after
    state, _ = rebuilt(stream)
    told = [(e.type, e.object, e.reason) for e in state.take_ownership(now_s=51.0)]
    assert told[0] == ("Requeued", KEY, "BackoffFinished")


async def as_of(
    source: str, stream: StoredStream, replica: LiveReplica, *, now_s: float
) -> AdmissionState:
    """The live replica's state ("live"), or a replica's rebuilt from `source` now, which
    takes ownership at `now_s` deciding nothing new."""
    if source == "live":
        return replica.state
    snapshot = decode_snapshot(encode_snapshot(replica.snapshot()))
    state = await rebuilt_from(source, stream, snapshot)
    assert state.take_ownership(now_s=now_s) == []
    return state


async def retried_again(stream: StoredStream, replica: LiveReplica, clock: list[float]) -> None:
    """prov says Retry again at 20 s, asking for 60 s more: requeueAt 80, later than 42."""
    clock[0] = 20.5
    again = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=60)
    stream.put(reported("admission_check", KEY, again, at_s=20.0))
    await replica.catch_up()


@pytest.mark.parametrize("source", ["live", "stream", "snapshot"])
async def test_a_retry_told_after_its_pods_are_gone_moves_its_wait_later(source: str) -> None:
    """Kueue (NeedsRequeueAtUpdate) moves requeueAt later for a check's Retry told while the
    workload waits out its back-off, its pods gone; it requeues at the later end, and so does
    a replica rebuilt meanwhile. Before, the Retry was ignored: requeued at 42 s."""
    stream, replica, clock = await retried(stopped_s=15.0)
    await retried_again(stream, replica, clock)
    state = await as_of(source, stream, replica, now_s=21.0)
    assert (state.engine.phase(KEY), state.engine.records[KEY].requeue_at_s) == ("Backoff", 80.0)
    if source == "live":
        for tick_s in (REQUEUE_AT_S, 79.9, 80.0):  # not requeued at the first end
            clock[0] = tick_s
            stream.put(submitted(workload(f"tick{tick_s}", queue="nowhere"), at_s=tick_s))
            await replica.catch_up()
        assert requeued_at(stream) == [(80.0, "BackoffFinished")]


@pytest.mark.parametrize("source", ["stream", "snapshot", "service"])
async def test_a_retry_whose_eviction_was_not_stored_is_answered_by_the_rebuilt_replica(
    source: str,
) -> None:
    """The replica applied the Retry (and snapshotted it) and stopped before its `evicted`
    was stored: its successor evicts it, from the check's time, and waits the same end."""
    stream, replica, _ = await told_retry(echoed=False)
    snapshot = decode_snapshot(encode_snapshot(replica.snapshot()))
    fields = [stream.envelope(seq).WhichOneof("payload") for seq in range(1, stream.last + 1)]
    del stream.data[fields.index("admission_check") + 1 :]  # what it published after
    state = await rebuilt_from(source, stream, snapshot)
    told = [(e.type, e.object, e.reason) for e in state.take_ownership(now_s=14.0)]
    assert told == [("Evicted", KEY, "AdmissionCheck")]
    assert state.engine.records[KEY].requeue_at_s == REQUEUE_AT_S


@pytest.mark.parametrize("source", ["live", "stream", "snapshot", "service"])
async def test_a_retry_for_a_check_removed_from_its_cluster_queue_moves_nothing(
    source: str,
) -> None:
    """The ClusterQueue stops requiring prov while `w` waits out its Retry's end (Kueue drops
    the check from the Workload's status then); a Retry prov tells after that moves nothing.
    The live engine and a rebuilt replica's ledger ask one rule (the ClusterQueue's checks
    when the Retry is told): both requeue at 42 s. Before, the ledger counted the checks of
    the reservation it lost, and a rebuilt replica waited until 80 s."""
    stream, replica, clock = await retried(stopped_s=15.0)
    stream.put(applied(cluster_queue(), at_ns=16 * 10**9))  # without its admissionChecks
    await replica.catch_up()
    await retried_again(stream, replica, clock)
    state = await as_of(source, stream, replica, now_s=21.0)
    record = state.engine.records[KEY]
    assert (state.engine.phase(KEY), record.requeue_at_s) == ("Backoff", REQUEUE_AT_S)


async def queued_behind_blocker() -> tuple[StoredStream, LiveReplica, list[float]]:
    """`blocker` (4 cpu) holds all of cq's quota, its check prov not answered yet; `w` (2 cpu)
    queues for quota behind it."""
    stream, replica, clock = await checked_queue(
        submitted(workload("blocker", cpu="4"), at_s=9.0),
        submitted(workload("w", cpu="2"), at_s=10.0),
    )
    assert replica.state.engine.phase(KEY) == "Pending"
    return stream, replica, clock


def reserved_at(stream: StoredStream) -> list[float]:
    """When each `quota_reserved` about `w` was stored."""
    envelopes = map(stream.envelope, range(1, stream.last + 1))
    return [
        e.time_unix_nano / 1e9
        for e in envelopes
        if e.workload == KEY and e.WhichOneof("payload") == "quota_reserved"
    ]


@pytest.mark.parametrize("source", ["live", "stream", "snapshot", "service"])
async def test_a_retry_told_while_it_queues_for_quota_holds_it_out_until_its_end(
    source: str,
) -> None:
    """Kueue's NeedsRequeueAtUpdate sets requeueAt for any unfinished workload, and its queue
    keeps the workload inadmissible until then: a Retry (30 s) told at 12.7 s while `w` waits
    for quota keeps it out though `blocker` leaves at 20 s; requeued at 42 s, it reserves
    once prov says Pending (its scheduler's nominate refuses a workload whose check says
    Retry, task checkverdicts). A replica rebuilt meanwhile waits for the same instant.
    Before, `w` reserved at 20."""
    stream, replica, clock = await queued_behind_blocker()
    clock[0] = HANDLED_S
    retry = pb.AdmissionCheckUpdated(check="prov", state="Retry", requeue_after_seconds=AFTER_S)
    stream.put(reported("admission_check", KEY, retry, at_s=RETRY_S))
    await replica.catch_up()
    state = await as_of(source, stream, replica, now_s=14.0)
    assert (state.engine.phase(KEY), state.engine.records[KEY].requeue_at_s) == (
        "Backoff",
        REQUEUE_AT_S,
    )
    if source != "live":
        return
    clock[0] = 20.0
    stream.put(reported("deleted", "ns/blocker", at_s=20.0))
    for tick_s in (20.0, 41.9, REQUEUE_AT_S):
        clock[0] = tick_s
        stream.put(submitted(workload(f"tick{tick_s}", queue="nowhere"), at_s=tick_s))
        await replica.catch_up()
    assert requeued_at(stream) == [(REQUEUE_AT_S, "BackoffFinished")]
    assert reserved_at(stream) == []  # prov still says Retry: Kueue's nominate refuses it
    clock[0] = REQUEUE_AT_S + 1
    pending = pb.AdmissionCheckUpdated(check="prov", state="Pending")
    stream.put(reported("admission_check", KEY, pending, at_s=clock[0]))
    await replica.catch_up()
    assert reserved_at(stream) == [REQUEUE_AT_S + 1]
