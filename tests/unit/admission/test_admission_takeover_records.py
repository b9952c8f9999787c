"""Takeover records as admission reads them (task "lease2"): which ones end a term, that any
record fences its partition, and what a snapshot keeps of them."""

from __future__ import annotations

import pytest

from muster.admission.fact_reader import fact_of
from muster.admission.facts import PartitionRecord, Term
from muster.admission.snapshot import CompactLog
from muster.admission.state import AdmissionState
from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(10)

MINE = Term(0, 10, "host/1/a")


def record(partition: int, sequence: int, **change: object) -> pb.Envelope:
    env = new_event(
        "partition_changed",
        pb.PartitionChanged(partition=partition, **change),  # type: ignore[arg-type]
        cluster="local",
        source="admission/0",
        partition=str(partition),
    )
    env.sequence = sequence
    return env


def taken_over(partition: int, sequence: int, term: Term) -> pb.Envelope:
    taken = pb.Takeover(shard=term.shard, term=term.number, owner=term.owner)
    return record(partition, sequence, taken_over=taken)


def state_of(term: Term | None = MINE) -> AdmissionState:
    """Shard 0 of 2: it decides the even partitions."""
    state = AdmissionState(shard=0, shards=2)
    state.term = term
    return state


def read(state: AdmissionState, env: pb.Envelope) -> None:
    fact = fact_of(env)
    assert isinstance(fact, PartitionRecord)
    state.apply(fact, now_s=0.0)


@pytest.mark.parametrize(
    ("partition", "term", "supersedes"),
    [
        pytest.param(4, Term(0, 11, "host/2/b"), True, id="later-term-of-its-shard"),
        pytest.param(4, Term(0, 9, "host/2/b"), False, id="earlier-term-of-its-shard"),
        pytest.param(4, MINE, False, id="its-own"),
        pytest.param(4, Term(1, 99, "host/2/b"), False, id="another-shard"),
        pytest.param(5, Term(0, 11, "host/2/b"), False, id="a-partition-it-does-not-decide"),
    ],
)
def test_only_a_later_term_of_its_shard_on_its_partition_puts_the_term_in_doubt(
    partition: int, term: Term, supersedes: bool
) -> None:
    state = state_of()
    read(state, taken_over(partition, 7, term))
    assert state.fences[partition] == 7  # every record fences its partition
    assert bool(state.superseded) is supersedes
    if supersedes:
        assert state.superseded == (
            "partition 4 was taken over by a later term 11 of shard 0 (host/2/b)"
        )


def test_a_replica_without_a_lease_is_never_superseded() -> None:
    state = state_of(term=None)
    read(state, taken_over(4, 7, Term(0, 11, "host/2/b")))
    assert not state.superseded
    assert state.fences[4] == 7


def test_a_takeover_is_not_a_move() -> None:
    state = state_of()
    owned = state.sharding.owned
    read(state, taken_over(4, 7, Term(1, 3, "other")))
    assert state.sharding.owned == owned
    assert not state.repartitioned


def test_a_record_of_a_kind_this_release_does_not_know_still_fences_its_partition() -> None:
    state = state_of()
    read(state, record(6, 12))  # a later release's kind reads as no change at all here
    assert state.fences[6] == 12
    assert not state.superseded
    assert not state.repartitioned


def test_a_snapshot_keeps_the_last_takeover_beside_the_last_record_until_a_move() -> None:
    state = state_of()
    log = CompactLog(state.ledger)
    envs = [
        taken_over(4, 5, Term(0, 3, "old")),
        taken_over(4, 6, MINE),
        record(4, 7, queue_left=pb.QueueLeft(local_queue="ns/lq", to_partition=8)),
    ]
    for env in envs:
        read(state, env)
        log.add(env)
    assert log.snapshot(sequence=7).sequences == (6, 7)
    moved = record(4, 8, shard=0)
    read(state, moved)
    log.add(moved)
    assert log.snapshot(sequence=8).sequences == (8,)  # a new decider's terms start there

    restored = state_of(Term(0, 4, "older"))  # a lapsed term rebuilding from the snapshot
    for env in envs[1:]:
        read(restored, env)
    assert restored.superseded
