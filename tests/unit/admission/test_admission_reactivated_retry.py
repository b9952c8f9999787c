"""A check's Retry told while the workload is inactive holds it out once it is reactivated
(task leftovers3). Kueue clears requeueState while a workload is inactive, but its workload
controller's NeedsRequeueAtUpdate (Kueue ff69552e79) sets requeueAt again from the Retry still
in status.admissionChecks once it is active: lastTransitionTime + requeueAfterSeconds, if still
to come; the check saying Ready sooner does not put it back in its queue. The live replica, one
rebuilt from the stream or a snapshot, and the watcher's Workload status agree."""

from __future__ import annotations

import pytest
from admission_stream import reported
from snapshot_world import rebuilt_from
from test_admission_requeue_overlap import KEY, KUEUE, STOPPED_S, World, check, timed_out

from muster.admission.snapshot import decode_snapshot, encode_snapshot
from muster.api.check_states import format_time
from muster.contracts.v1 import events_pb2 as pb

RETRY_S, AFTER_S, REACTIVATED_S = 21.0, 60, 30.0
END_S = RETRY_S + AFTER_S


async def reactivated() -> World:
    """`w` timed out and stopped (inactive from 20 s); prov says Retry at 21 s
    (requeueAfterSeconds 60 s); resumed at 30 s."""
    world = await timed_out()
    await world.at(STOPPED_S, reported("eviction_completed", KEY, at_s=STOPPED_S))
    stop = pb.WorkloadActiveChanged(active=False)
    await world.at(20.0, reported("active_changed", KEY, stop, at_s=20.0))
    retry = check("Retry", after_s=AFTER_S, since_s=RETRY_S)
    await world.at(RETRY_S, reported("admission_check", KEY, retry, at_s=RETRY_S))
    resume = pb.WorkloadActiveChanged(active=True)
    await world.at(REACTIVATED_S, reported("active_changed", KEY, resume, at_s=REACTIVATED_S))
    return world


async def test_it_waits_for_the_retry_s_end_though_the_check_says_ready_sooner() -> None:
    world = await reactivated()
    engine = world.replica.state.engine
    assert (engine.phase(KEY), engine.records[KEY].requeue_at_s) == ("Backoff", END_S)
    assert (world.requeue_state() or {}).get("requeueAt") == format_time(END_S)

    await world.at(35.0, reported("admission_check", KEY, check("Ready"), at_s=35.0))
    await world.at(END_S - 0.5)
    assert world.requeued()[-1] == (REACTIVATED_S, "Reactivated")
    await world.at(END_S)
    assert world.requeued()[-1] == (END_S, "BackoffFinished")
    assert engine.phase(KEY) == "Admitted"  # prov Ready: reserved and admitted at once
    assert (world.requeue_state() or {}).get("requeueAt") is None


@pytest.mark.parametrize("source", ["stream", "snapshot", "service"])
async def test_a_rebuilt_replica_holds_it_out_until_the_same_end(source: str) -> None:
    world = await reactivated()
    snapshot = decode_snapshot(encode_snapshot(world.replica.snapshot()))
    state = await rebuilt_from(source, world.stream, snapshot, kueue=KUEUE)
    assert state.take_ownership(now_s=40.0) == []
    record = state.engine.records[KEY]
    assert (state.engine.phase(KEY), record.requeue_at_s) == ("Backoff", END_S)
