"""A Retry from a check the workload's ClusterQueue does not name holds nothing (task checks2).
Kueue's workload controller keeps status.admissionChecks in line with the ClusterQueue's list,
so such a check has no Retry for NeedsRequeueAtUpdate to find. Admission already ignored it
(`core.requeue_state.retry_counts_waiting`); the watcher wrote requeueAt from it all the same.
Now the engine and the watcher's Workload status, reading one stored stream, agree."""

from __future__ import annotations

from admission_stream import applied, reported
from test_admission_reactivated_retry import END_S
from test_admission_requeue_overlap import BACKOFF_END_S, KEY, STOPPED_S, World, check, timed_out
from test_admission_requeued_words import OTHER, stopped_running

from muster.api.check_states import format_time
from muster.contracts.v1 import events_pb2 as pb


async def test_a_retry_told_while_inactive_by_a_check_not_named_holds_nothing() -> None:
    world = await stopped_running(told="other")
    engine = world.replica.state.engine
    assert engine.phase(KEY) == "QuotaReserved"  # queued and reserved at once
    assert world.requeue_state() is None
    named = await stopped_running(told="prov")
    assert named.requeue_state() == {"requeueAt": format_time(END_S)}  # the pair that holds


async def test_a_retry_told_while_backing_off_by_a_check_not_named_moves_nothing() -> None:
    world: World = await timed_out()
    world.stream.put(applied(OTHER))
    envelopes = map(world.stream.envelope, range(1, world.stream.last + 1))
    (evicted,) = [e for e in envelopes if e.evicted.reason]
    done = pb.EvictionCompleted(eviction_id=evicted.event_id)
    await world.at(STOPPED_S, reported("eviction_completed", KEY, done, at_s=STOPPED_S))
    retry = check("Retry", after_s=60, since_s=19.0, name="other")
    await world.at(19.0, reported("admission_check", KEY, retry, at_s=19.0))
    engine = world.replica.state.engine
    assert (engine.phase(KEY), engine.records[KEY].requeue_at_s) == ("Backoff", BACKOFF_END_S)
    assert world.requeue_state() == {"count": 1, "requeueAt": format_time(BACKOFF_END_S)}
