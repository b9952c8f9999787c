"""A late admission of a workload that ended (docs/events.md, "A name used again"): admission
decided it before it read the deletion, and stored it after the name was submitted again."""

from __future__ import annotations

from cluster_docs import event, fed, kueue_workload, node, objects, pod

from muster.contracts.v1 import events_pb2
from muster.gangpermit.translate import decide


def test_an_admission_of_a_deleted_workload_holds_nothing_for_the_new_one_of_its_name() -> None:
    state = fed(node("a", cpu="2"))
    first_submitted, first_admitted = kueue_workload("w", 1)
    again_submitted, again_admitted = kueue_workload("w", 1)
    deleted = event("deleted", events_pb2.WorkloadDeleted(), workload="ns/w")
    for env in (first_submitted, deleted, again_submitted):
        state.apply_event(env)
    # The new workload's pod, made by the binder for its own admission, not yet read here.
    state.put(objects(pod("w-main-0", labels={"muster.dev/workload": "w"}))[0])

    first_admitted.submitted_id = first_submitted.event_id
    assert state.apply_event(first_admitted) is False
    assert "ns/w" not in state.admitted
    assert [e.type for e in decide(state, now_s=1.0)] == []  # its pod waits for its own

    again_admitted.submitted_id = again_submitted.event_id
    assert state.apply_event(again_admitted) is True
    (permit,) = decide(state, now_s=2.0)
    assert (permit.type, permit.cause) == ("workload.gang_permitted", again_admitted.event_id)


def test_an_admission_written_before_submitted_ids_is_held_as_before() -> None:
    state = fed(node("a", cpu="2"))
    submitted, admitted = kueue_workload("w", 1)
    state.apply_event(submitted)
    assert admitted.submitted_id == ""
    state.apply_event(admitted)
    assert "ns/w" in state.admitted


def test_a_late_admission_is_dropped_for_the_kept_time_then_its_end_is_forgotten() -> None:
    """`--ended-kept-seconds`, in the stream's time (before: the newest 200 000, for good)."""
    kept_s = 60.0
    state = fed(node("a", cpu="2"), ended_kept_s=kept_s)
    first_submitted, first_admitted = kueue_workload("w", 1)
    again_submitted, _ = kueue_workload("w", 1)
    deleted = event("deleted", events_pb2.WorkloadDeleted(), workload="ns/w")
    for env, at_s in ((first_submitted, 0.0), (deleted, 10.0), (again_submitted, 10.0 + kept_s)):
        env.time_unix_nano = int(at_s * 1e9)
        state.apply_event(env)

    first_admitted.submitted_id = first_submitted.event_id
    assert state.apply_event(first_admitted) is False  # within the time: still dropped
    assert "ns/w" not in state.admitted

    other_submitted, _ = kueue_workload("other", 1)
    other_submitted.time_unix_nano = int((11.0 + kept_s) * 1e9)
    state.apply_event(other_submitted)
    assert first_submitted.event_id not in state.ended
    assert len(state.ended) == 0
