"""A gang-permit restarted while a placement `cmd.evict` has gone unanswered for a long time goes
on with its back-off: re-sends come with the attempts and ids they would have had without the
restart, never an id sent before. Commands live in a work queue, not in the events stream a
restart replays, so what it reads back is when the preemptor first named the victim
(`placement_preempted`). Before, the back-off started again from the first delay: an eviction
unanswered for hours was re-sent 30 s after every restart, its ids those of re-sends long done.

A re-send that fell due while gang-permit was down goes at once after the restart (task
evictfix); before, it was taken as sent, and an eviction lost just before a crash waited one
more back-off (up to 5 min). The commands a restart sends at once (the preemption decided
again, same id; that re-send) are harmless: the binder stops each pod only while its uid is
the one named (`binder.handlers.on_evict`), and any answer settles the flight read back.
"""

from __future__ import annotations

from typing import Any

from cluster_docs import fed, preemption

from muster.contracts.v1 import events_pb2
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide

RESEND_S, CAP_S = 30.0, 300.0  # the defaults: 30 s, doubling, at most 300 s apart
VICTIM_PODS = 4
PREEMPTED_AT_S = 10.0
HOURS_S = 3 * 3600.0
LONG_TIMEOUT_S = 1e6  # the preemptor waits the whole time, not timed out


def ran_for(seconds: float, **settings: Any) -> tuple[list[events_pb2.Envelope], list[str]]:
    """Gang-permit preempting at PREEMPTED_AT_S and re-sending, unanswered, for `seconds`:
    the events stream it wrote (numbered), and the ids of every `cmd.evict` it sent."""
    state = fed(preemption(VICTIM_PODS), **settings)
    out = decide(state, now_s=PREEMPTED_AT_S)
    end = PREEMPTED_AT_S + seconds
    while (due := state.evictions.next_due_s()) is not None and due <= end:
        out += decide(state, now_s=due)
    stream = [e for e in out if not e.type.startswith("cmd.")]  # commands: the work queue
    for n, env in enumerate(stream, start=1):
        env.sequence = n
    return stream, [e.event_id for e in out if e.type == "cmd.evict"]


def restarted(stream: list[events_pb2.Envelope], **settings: Any) -> GangPermitState:
    return fed(preemption(VICTIM_PODS), stream=stream, **settings)


def evicts(envs: list[events_pb2.Envelope]) -> list[events_pb2.Envelope]:
    return [e for e in envs if e.type == "cmd.evict"]


def test_a_restart_hours_into_an_unanswered_eviction_keeps_the_back_off_at_its_cap() -> None:
    stream, sent = ran_for(HOURS_S, default_timeout_s=LONG_TIMEOUT_S)
    state = restarted(stream, default_timeout_s=LONG_TIMEOUT_S)
    now = PREEMPTED_AT_S + HOURS_S + 1.0

    again, resent = evicts(decide(state, now_s=now))  # the preemption decided again: a copy
    assert again.event_id == sent[0]
    assert resent.event_id not in sent  # a new re-send, not a copy of one done hours ago
    assert resent.evict_requested.attempt == len(sent) + 1

    assert state.evictions.next_due_s() == now + CAP_S  # not 30 s after the restart


def test_a_restart_early_in_an_eviction_resumes_where_its_doubling_was() -> None:
    # Sent at 10 s, re-sent at 40 s and 100 s, dead at 160 s and back at once: the re-send at
    # 100 s may be lost, so the next (due at 220 s) goes now, then 240 s later.
    stream, sent = ran_for(150.0, default_timeout_s=LONG_TIMEOUT_S)
    assert len(sent) == 3
    state = restarted(stream, default_timeout_s=LONG_TIMEOUT_S)

    _, resent = evicts(decide(state, now_s=160.0))

    assert resent.evict_requested.attempt == 4
    assert resent.event_id not in sent
    assert state.evictions.next_due_s() == 160.0 + RESEND_S * 8


def test_a_preemptor_timed_out_before_the_restart_resumes_its_victims_back_off() -> None:
    # It timed out at 310 s waiting for victims whose command was lost; the restart tries it
    # again (a new attempt, new ids), and the victims' eviction goes on from where it was.
    stream, sent = ran_for(HOURS_S)
    assert "workload.gang_rejected" in [e.type for e in stream]
    state = restarted(stream)
    now = PREEMPTED_AT_S + HOURS_S + 1.0

    again, resent = evicts(decide(state, now_s=now))
    assert again.event_id not in sent  # the next attempt's preemption
    assert resent.event_id not in sent
    assert resent.evict_requested.attempt > 2  # its back-off went on, not over at 30 s

    assert state.evictions.next_due_s() == now + CAP_S


def test_a_re_send_that_fell_due_while_it_was_down_goes_at_once_after_the_restart() -> None:
    # Sent at 10 s; gang-permit dies at 35 s, before the re-send due at 40 s; back at 50 s.
    stream, sent = ran_for(25.0, default_timeout_s=LONG_TIMEOUT_S)
    assert len(sent) == 1
    state = restarted(stream, default_timeout_s=LONG_TIMEOUT_S)

    again, resent = evicts(decide(state, now_s=50.0))  # not at 100 s, a back-off later

    assert again.event_id == sent[0]  # the preemption decided again: a copy
    # The id of the re-send after the one that fell due (which a gang-permit that died just
    # after it sent it had used, a copy JetStream would drop): never sent before.
    assert resent.event_id not in sent
    assert resent.evict_requested.attempt == 3
    assert state.evictions.next_due_s() == 50.0 + RESEND_S * 4  # doubling on from there


def test_a_restart_before_the_first_re_send_falls_due_waits_for_it() -> None:
    stream, sent = ran_for(15.0, default_timeout_s=LONG_TIMEOUT_S)
    state = restarted(stream, default_timeout_s=LONG_TIMEOUT_S)

    (again,) = evicts(decide(state, now_s=30.0))

    assert again.event_id == sent[0]
    assert state.evictions.next_due_s() == PREEMPTED_AT_S + RESEND_S
