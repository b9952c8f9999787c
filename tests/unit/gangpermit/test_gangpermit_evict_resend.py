"""A placement `cmd.evict` the binder never answered (dead-lettered, or lost) is sent again on a
timer, with new ids and the next attempt, backing off, for the victims' pods the preemptor still
waits for; an answer, the pods' end or the preemptor's end stops it. Before, nothing re-sent it:
a preemptor that timed out waiting for those victims waited for ever."""

from __future__ import annotations

import itertools

from cluster_docs import objects, preemption

from muster.api.model import Pod
from muster.bus import new_event
from muster.contracts.v1 import events_pb2
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide

PREEMPTOR, VICTIM = "ns/high/workers", "ns/low"
RESEND_S = 30.0
VICTIM_PODS = 4


def fed_cluster(*, evict_resend_s: float = RESEND_S) -> GangPermitState:
    state = GangPermitState(cluster="local", evict_resend_s=evict_resend_s)
    state.restored()
    for obj in objects(preemption(VICTIM_PODS)):
        state.put(obj)
    return state


def evicts(envs: list[events_pb2.Envelope]) -> list[events_pb2.Envelope]:
    return [e for e in envs if e.type == "cmd.evict"]


def named(envs: list[events_pb2.Envelope]) -> list[str]:
    return sorted(p.name for e in evicts(envs) for p in e.evict_requested.pods)


def answer(command: events_pb2.Envelope) -> events_pb2.Envelope:
    """The binder's answer to `command`, as `binder.handlers.on_evict` publishes it."""
    done = events_pb2.EvictionCompleted(pods=len(command.evict_requested.pods))
    return new_event(
        "eviction_completed", done, cluster="local", workload=command.workload,
        cause=command, source="binder",
    )  # fmt: skip


def gone(state: GangPermitState, names: set[str]) -> None:
    for obj in objects(preemption(VICTIM_PODS)):
        if isinstance(obj, Pod) and obj.meta.name in names:
            state.remove(obj)


def test_an_unanswered_evict_is_sent_again_with_new_ids_backing_off() -> None:
    state = fed_cluster()
    (first,) = evicts(decide(state, now_s=10.0))

    assert decide(state, now_s=10.0 + RESEND_S - 1) == []
    (again,) = decide(state, now_s=10.0 + RESEND_S)
    assert again.type == "cmd.evict"
    assert named([again]) == named([first]) == [f"low-{i}" for i in range(VICTIM_PODS)]
    assert again.event_id != first.event_id
    assert (again.workload, again.evict_requested.attempt) == (VICTIM, 2)
    # Twice as long before the next one.
    assert decide(state, now_s=10.0 + 3 * RESEND_S - 1) == []
    (third,) = decide(state, now_s=10.0 + 3 * RESEND_S)
    assert third.evict_requested.attempt == 3
    assert len({first.event_id, again.event_id, third.event_id}) == 3
    assert state.resent_evictions == 2


def test_the_back_off_stops_growing_at_its_cap() -> None:
    state = fed_cluster(evict_resend_s=100.0)
    decide(state, now_s=0.0)
    times: list[float] = []
    now = 0.0
    while len(times) < 5:
        due = state.evictions.next_due_s()
        assert due is not None
        now = due
        assert evicts(decide(state, now_s=now))
        times.append(now)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps == [200.0, 300.0, 300.0, 300.0]  # 100, 200, then the 300 s cap


def test_a_preemptor_timed_out_while_its_evict_was_lost_gets_it_sent_again() -> None:
    state = fed_cluster(evict_resend_s=1000.0)
    decide(state, now_s=10.0)
    gone(state, {"low-0"})  # the binder stopped one pod, then the command was dead-lettered
    (rejected,) = decide(state, now_s=10.0 + 300.0)  # the deadline: it waits for the victims
    assert rejected.type == "workload.gang_rejected"
    assert decide(state, now_s=1000.0) == []  # nothing else would ever wake it

    again = decide(state, now_s=10.0 + 1000.0)

    assert named(again) == ["low-1", "low-2", "low-3"]  # what still holds its room


def test_an_answered_evict_is_not_sent_again() -> None:
    state = fed_cluster()
    (command,) = evicts(decide(state, now_s=10.0))
    answered = answer(command)
    answered.sequence = 1

    assert state.apply_event(answered) is False
    assert decide(state, now_s=10.0 + 5 * RESEND_S) == []
    assert len(state.evictions) == 0


def test_nothing_is_sent_again_once_the_victims_are_gone() -> None:
    state = fed_cluster()
    decide(state, now_s=10.0)
    gone(state, {f"low-{i}" for i in range(VICTIM_PODS)})

    envs = decide(state, now_s=10.0 + RESEND_S)

    assert [e.type for e in envs] == ["workload.gang_permitted"]
    assert decide(state, now_s=10.0 + 5 * RESEND_S) == []
    assert len(state.evictions) == 0


def test_nothing_is_sent_again_once_the_preemptor_is_gone() -> None:
    state = fed_cluster()
    decide(state, now_s=10.0)
    (preemptor,) = [o for o in objects(preemption(VICTIM_PODS)) if o.meta.name == "high-0"]
    state.remove(preemptor)

    assert evicts(decide(state, now_s=10.0 + RESEND_S)) == []
    assert len(state.evictions) == 0
