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


async def told_retry(*, echoed: bool = True) -> tuple[StoredStream, LiveReplica, list[float]]:
    """`w` reserved at 10 s in a ClusterQueue requiring check prov; prov answers Retry (30 s),
    which evicts it (the replica reads its `evicted` back unless not `echoed`)."""
    clock = [10.0]
    stream = StoredStream()
    replica = LiveReplica(stream, clock=clock)
    with_check = cluster_queue()
    with_check["spec"]["admissionChecks"] = ["prov"]
    for manifest in (flavor(), CHECK, with_check, local_queue()):
        stream.put(applied(manifest))
    stream.put(submitted(workload("w"), at_s=10.0))
    await replica.catch_up()
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
    state = replica.state
    if source != "live":
        snapshot = decode_snapshot(encode_snapshot(replica.snapshot()))
        state = await rebuilt_from(source, stream, snapshot)
        assert state.take_ownership(now_s=21.0) == []
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
