"""A round's `quota_reserved` and `admitted` are sent together (docs/events.md, "Order"): when
a reconnect loses the first and stores the second, the stream holds the `admitted` first, and
perhaps a copy. Readers of the stream (a rebuild, another replica) take it as both."""

from __future__ import annotations

import asyncio

import pytest
from admission_stream import applied, cluster_queue, flavor, local_queue, submitted, workload
from snapshot_world import LiveReplica, StoredStream, rebuilt, taking_over

from muster.admission.ledger import Phase
from muster.api.model import WorkloadKey
from muster.bus import Retry
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(10)


class LosingReservations(StoredStream):
    """A reconnect loses each workload's first `quota_reserved` while its `admitted`, sent
    right after it, is stored; the reservation is stored when sent again."""

    def __init__(self) -> None:
        super().__init__()
        self.lost: set[str] = set()

    async def publish(self, env: pb.Envelope, **_: object) -> int:
        if env.type == "workload.quota_reserved" and env.workload not in self.lost:
            self.lost.add(env.workload)
            await asyncio.sleep(0)  # the admitted, sent after it, reaches the server first
            raise Retry(0.0, "connection lost")
        return self.put(env)


async def admitted_out_of_order(names: list[str]) -> tuple[StoredStream, LiveReplica]:
    stream = LosingReservations()
    replica = LiveReplica(stream, clock=[10.0])
    replica.rounds.retry_s = 0.0
    for manifest in (flavor(), cluster_queue(cpu="2"), local_queue()):
        stream.put(applied(manifest))
    for name in names:
        stream.put(submitted(workload(name, cpu="1")))
    await replica.catch_up()
    return stream, replica


async def test_a_live_replica_publishes_its_reservation_again_after_the_admission() -> None:
    stream, replica = await admitted_out_of_order(["a"])
    stored = [field for field, _ in stream.types(tuple(range(1, stream.last + 1)))]
    decisions = [field for field in stored if field != "config_applied"]
    assert decisions == ["submitted", "admitted", "quota_reserved"]
    assert replica.state.ledger.entries[WorkloadKey("ns/a")].phase is Phase.ADMITTED


@pytest.mark.parametrize("copies", [0, 1], ids=["reordered", "reordered-and-copied"])
async def test_a_rebuild_reads_an_admission_stored_before_its_reservation_as_both(
    copies: int,
) -> None:
    stream, replica = await admitted_out_of_order(["a", "b"])
    stored = map(stream.envelope, range(1, stream.last + 1))
    admissions = [env for env in stored if env.WhichOneof("payload") == "admitted"]
    for env in admissions[:copies]:
        env.event_id += "-copy"
        stream.put(env)  # a copy under another id: JetStream keeps both
    state, _ = rebuilt(stream)
    live = replica.state.ledger.entries
    for key in (WorkloadKey("ns/a"), WorkloadKey("ns/b")):
        entry = state.ledger.entries[key]
        assert entry.phase is Phase.ADMITTED
        assert entry.admission == live[key].admission
    taken = taking_over(state, now_s=20.0)
    assert taken["events"] == []  # nothing decided again: no second reservation or admission
    assert taken["phases"] == {"ns/a": "Admitted", "ns/b": "Admitted"}
    # Their quota counts: a third workload waits.
    stream.put(submitted(workload("c", cpu="1")))
    rebuilt_again, _ = rebuilt(stream)
    assert taking_over(rebuilt_again, now_s=20.0)["phases"]["ns/c"] == "Pending"
