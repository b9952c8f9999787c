"""Evictions in flight: attempts, re-sends, completion, giving up, duplicates."""

from __future__ import annotations

import pytest

from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb
from muster.preemption.state import Evictions
from muster.preemption.translate import evict_command


def evicted(key: str = "ns/v", *, seq: int = 1, cluster: str = "local") -> pb.Envelope:
    env = new_event(
        "evicted",
        pb.WorkloadEvicted(reason="Preempted", message="room", preemptor="ns/u"),
        cluster=cluster,
        workload=key,
        source="admission/0",
    )
    env.sequence = seq
    return env


def completed(key: str = "ns/v", *, seq: int = 2, cluster: str = "local") -> pb.Envelope:
    env = new_event(
        "eviction_completed", pb.EvictionCompleted(), cluster=cluster, workload=key, source="binder"
    )
    env.sequence = seq
    return env


def test_attempts_repeat_every_grace_period_until_completed() -> None:
    flights = Evictions(resend_s=30, max_attempts=10)
    flight = flights.evicted(evicted(), now_s=0)
    assert flight is not None
    assert flight.attempt == 1
    assert flights.next_due_s() == 30
    assert flights.due(now_s=29) == []
    (due,) = flights.due(now_s=30)
    assert (due.attempt, due.give_up) == (2, False)
    assert flights.next_due_s() == 60
    assert flights.completed(completed()) is flight
    assert flights.due(now_s=1000) == []
    assert len(flights) == 0


def test_gives_up_after_the_last_attempt() -> None:
    flights = Evictions(resend_s=1, max_attempts=2)
    flights.evicted(evicted(), now_s=0)
    assert [d.attempt for d in flights.due(now_s=1)] == [2]
    (last,) = flights.due(now_s=2)
    assert last.give_up
    assert len(flights) == 0


def test_duplicates_change_nothing() -> None:
    flights = Evictions(resend_s=30, max_attempts=10)
    first = evicted()
    flight = flights.evicted(first, now_s=0)
    assert flights.evicted(evicted(), now_s=5) is None  # another id: the same eviction
    assert flights.evicted(first, now_s=5) is flight  # a redelivery: re-send, same id
    assert flight is not None
    assert (flight.attempt, flight.next_at_s) == (1, 30)
    flights.completed(completed(seq=5))
    assert flights.evicted(first, now_s=6) is None  # older than its completion


def test_workloads_of_two_clusters_are_separate_flights() -> None:
    flights = Evictions(resend_s=30, max_attempts=10)
    assert flights.evicted(evicted(cluster="east"), now_s=0) is not None
    assert flights.evicted(evicted(cluster="west"), now_s=0) is not None
    assert len(flights) == 2


def test_evict_command_goes_to_the_victims_cluster_with_an_id_per_attempt() -> None:
    victim = evicted(cluster="east")
    one, two = evict_command(victim, attempt=1), evict_command(victim, attempt=2)
    assert (one.type, one.cluster, one.workload, one.cause) == (
        "cmd.evict",
        "east",
        "ns/v",
        victim.event_id,
    )
    assert (one.evict_requested.reason, one.evict_requested.attempt) == ("Preempted", 1)
    assert one.event_id == evict_command(victim, attempt=1).event_id != two.event_id


@pytest.mark.parametrize(("resend_s", "attempts"), [(0, 1), (1, 0)])
def test_settings_are_validated(resend_s: float, attempts: int) -> None:
    with pytest.raises(ValueError, match="resend"):
        Evictions(resend_s=resend_s, max_attempts=attempts)


def test_a_completion_of_an_earlier_eviction_leaves_the_current_one_in_flight() -> None:
    flights = Evictions(resend_s=30, max_attempts=10)
    earlier = evicted(seq=1)
    flights.evicted(earlier, now_s=0)
    flights.completed(completed(seq=2))
    current = evicted(seq=9)
    flight = flights.evicted(current, now_s=40)
    late = completed(seq=12)  # attempt 2 of the earlier eviction, carried out late
    late.eviction_completed.eviction_id = earlier.event_id
    assert flights.completed(late) is None
    assert flights.flights[("local", "ns/v")] is flight  # still re-sent until its own comes
    done = completed(seq=14)
    done.eviction_completed.eviction_id = current.event_id
    assert flights.completed(done) is flight


def test_every_attempt_names_the_eviction_it_carries_out() -> None:
    env = evicted(seq=7)
    command = evict_command(env, attempt=3)
    assert (command.evict_requested.eviction_id, command.evict_requested.eviction_sequence) == (
        env.event_id,
        7,
    )


def test_an_answer_to_a_placement_eviction_of_pods_leaves_the_workloads_eviction_in_flight() -> (
    None
):
    flights = Evictions(resend_s=30, max_attempts=10)
    flight = flights.evicted(evicted(seq=1), now_s=0)
    # Gang-permit evicted pods outside Kueue whose owner has the same key (a part of three).
    placement = completed(seq=2)
    placement.eviction_completed.pods, placement.eviction_completed.parts = 300, 3
    assert flights.completed(placement) is None
    assert flights.flights[("local", "ns/v")] is flight
    assert flights.completed(completed(seq=3)) is flight
