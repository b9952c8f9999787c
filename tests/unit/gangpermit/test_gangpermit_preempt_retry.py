"""A gang outside Kueue that preempted, and whose deadline passed while its victims were still
stopping: it times out (its nominated room goes back, so a victim that never stops keeps no room
from others), and it is tried again once the last of those victims' pods is gone: they were
evicted for it. A retried pass preempts again for whatever holds its room then, with new event
ids, so a `cmd.evict` that was lost is told again whenever the preemptor is tried again.
"""

from __future__ import annotations

import pytest
from cluster_docs import Doc, fed, objects, preemption

from muster.api.model import Pod
from muster.contracts.v1 import events_pb2
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide

VICTIM_PODS = 4
PREEMPTOR = "ns/high/workers"
NO_RESEND_S = 1e6


def cluster() -> list[Doc]:
    """`preemption`'s cluster: `high` preempts `low` (the default deadline, 300 s)."""
    return preemption(VICTIM_PODS)


def fed_cluster() -> GangPermitState:
    # The binder answers in time here: no eviction is sent again within these tests
    # (test_gangpermit_evict_resend.py).
    state = GangPermitState(cluster="local", evict_resend_s=NO_RESEND_S)
    state.restored()
    for obj in objects(cluster()):
        state.put(obj)
    return state


def victims(state: GangPermitState, names: set[str]) -> None:
    """The victim's pods `names` are gone from the cluster (the binder deleted them)."""
    for obj in objects(cluster()):
        if isinstance(obj, Pod) and obj.meta.name in names:
            state.remove(obj)


def types(envs: list[events_pb2.Envelope]) -> list[tuple[str, str]]:
    return [(e.type, e.workload) for e in envs]


def evicted(envs: list[events_pb2.Envelope]) -> list[str]:
    return sorted(p.name for e in envs if e.type == "cmd.evict" for p in e.evict_requested.pods)


def test_a_preemptor_timed_out_while_its_victims_stop_is_permitted_once_they_are_gone() -> None:
    state = fed_cluster()
    first = decide(state, now_s=10.0)
    assert types(first) == [("workload.placement_preempted", PREEMPTOR), ("cmd.evict", "ns/low")]
    victims(state, {"low-0", "low-1"})  # the others are slow to stop

    (rejected,) = decide(state, now_s=400.0)  # past the deadline (10 s + 300 s)
    assert (rejected.type, rejected.gang_rejected.reason) == (
        "workload.gang_rejected",
        "GangTimedOut",
    )
    assert decide(state, now_s=401.0) == []

    victims(state, {"low-2", "low-3"})
    (permitted,) = decide(state, now_s=402.0)

    assert types([permitted]) == [("workload.gang_permitted", PREEMPTOR)]
    assert [b.node for b in permitted.gang_permitted.bindings] == ["a"]


def test_a_lost_evict_is_told_again_with_new_ids_when_the_timed_out_preemptor_is_tried_again() -> (
    None
):
    state = fed_cluster()
    first = decide(state, now_s=10.0)  # its `cmd.evict` never reaches the binder
    assert types(decide(state, now_s=400.0)) == [("workload.gang_rejected", PREEMPTOR)]
    assert decide(state, now_s=401.0) == []  # nothing of the victim went: no retry yet

    # The user deletes the preemptor's pod and applies it again: a new try.
    made_again = cluster()[-1]
    made_again["metadata"]["uid"] = "again"
    (old,) = objects(cluster()[-1:])
    state.remove(old)
    state.put(objects([made_again])[0])
    again = decide(state, now_s=402.0)

    assert types(again) == [("workload.placement_preempted", PREEMPTOR), ("cmd.evict", "ns/low")]
    assert evicted(again) == evicted(first) == [f"low-{i}" for i in range(VICTIM_PODS)]
    assert {e.event_id for e in again}.isdisjoint(e.event_id for e in first)  # not deduplicated


@pytest.mark.parametrize("gone", [True, False], ids=["victims-gone", "victims-still-stopping"])
def test_a_gang_permit_restarted_after_a_preemptor_timed_out_tries_it_again(gone: bool) -> None:
    state = fed_cluster()
    stream = decide(state, now_s=10.0) + decide(state, now_s=400.0)
    for n, env in enumerate(stream, start=1):
        env.sequence = n
    victim = {d["metadata"]["name"] for d in cluster() if d["metadata"]["name"].startswith("low-")}
    left = [d for d in cluster() if not gone or d["metadata"]["name"] not in victim]

    restarted = fed(left, stream=stream, evict_resend_s=NO_RESEND_S)
    again = decide(restarted, now_s=401.0)  # not parked until its pods change

    if gone:
        assert types(again) == [("workload.gang_permitted", PREEMPTOR)]
    else:  # preempted again, with the next attempt's ids
        assert types(again) == types(stream[:2])
        assert {e.event_id for e in again}.isdisjoint(e.event_id for e in stream)
