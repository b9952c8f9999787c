"""A check-less admission is one `admitted` with its reservation (docs/events.md, "Admitted with
its reservation"). Streams written before that hold a `quota_reserved` beside it: before it,
or after it when a reconnect lost the first of the two sent together, perhaps with a copy.
A rebuild of either reads the same state as of the stream written today."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from admission_stream import applied, cluster_queue, flavor, local_queue, submitted, workload
from snapshot_world import LiveReplica, StoredStream, rebuilt, summary, taking_over

from muster.admission.ledger import Phase
from muster.api.model import WorkloadKey
from muster.bus.envelope import new_event
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(10)

KEYS = (WorkloadKey("ns/a"), WorkloadKey("ns/b"))


async def written_today(names: list[str]) -> tuple[StoredStream, LiveReplica]:
    stream = StoredStream()
    replica = LiveReplica(stream, clock=[10.0])
    for manifest in (flavor(), cluster_queue(cpu="2"), local_queue()):
        stream.put(applied(manifest))
    for name in names:
        stream.put(submitted(workload(name, cpu="1")))
    await replica.catch_up()
    return stream, replica


def reservation_of(admitted: pb.Envelope) -> pb.Envelope:
    """The `quota_reserved` a replica of before the change published beside `admitted`."""
    env = new_event(
        "quota_reserved",
        pb.QuotaReserved(admission=admitted.admitted.admission),
        cluster=admitted.cluster,
        workload=admitted.workload,
        generation=admitted.generation,
        source=admitted.source,
        now_ns=admitted.time_unix_nano,
    )
    env.submitted_id = admitted.submitted_id
    return env


def written_before(
    today: StoredStream, place: Callable[[pb.Envelope], list[pb.Envelope]]
) -> StoredStream:
    """`today`'s events with each `admitted` as an older replica stored it (`place`)."""
    old = StoredStream()
    for seq in range(1, today.last + 1):
        env = today.envelope(seq)
        env.sequence = 0
        if env.WhichOneof("payload") != "admitted":
            old.put(env)
            continue
        env.admitted.with_reservation = False
        for stored in place(env):
            old.put(stored)
    return old


def in_order(admitted: pb.Envelope) -> list[pb.Envelope]:
    return [reservation_of(admitted), admitted]


def reordered(admitted: pb.Envelope) -> list[pb.Envelope]:
    return [admitted, reservation_of(admitted)]


def reordered_and_copied(admitted: pb.Envelope) -> list[pb.Envelope]:
    copy = pb.Envelope()
    copy.CopyFrom(admitted)
    copy.event_id += "-copy"  # a copy under another id: JetStream keeps both
    return [admitted, copy, reservation_of(admitted)]


async def test_a_replica_publishes_one_admitted_with_its_reservation() -> None:
    stream, replica = await written_today(["a"])
    stored = [stream.envelope(seq) for seq in range(1, stream.last + 1)]
    decisions = [env for env in stored if env.WhichOneof("payload") != "config_applied"]
    assert [env.WhichOneof("payload") for env in decisions] == ["submitted", "admitted"]
    assert decisions[1].admitted.with_reservation
    assert replica.state.ledger.entries[KEYS[0]].phase is Phase.ADMITTED


@pytest.mark.parametrize("place", [in_order, reordered, reordered_and_copied])
async def test_a_stream_written_before_the_change_rebuilds_the_same_state(
    place: Callable[[pb.Envelope], list[pb.Envelope]],
) -> None:
    today, replica = await written_today(["a", "b"])
    before = written_before(today, place)
    assert before.last > today.last  # it holds the reservations of before
    new_state, _ = rebuilt(today)
    old_state, _ = rebuilt(before)
    live = replica.state.ledger.entries
    for key in KEYS:
        assert new_state.ledger.entries[key].phase is Phase.ADMITTED
        assert new_state.ledger.entries[key].admission == live[key].admission
    new, old = summary(new_state), summary(old_state)
    assert old["entries"] == new["entries"]
    assert old["arrivals"] == new["arrivals"]
    taken = taking_over(old_state, now_s=20.0)
    assert taken["events"] == []  # nothing decided again: no second reservation or admission
    assert taken == taking_over(new_state, now_s=20.0)
    # Their quota counts: a third workload waits.
    before.put(submitted(workload("c", cpu="1")))
    rebuilt_again, _ = rebuilt(before)
    assert taking_over(rebuilt_again, now_s=20.0)["phases"]["ns/c"] == "Pending"
