"""The watcher's reading of a Kueue Workload's `status.admissionChecks`
(`translate.check_updates`): each controller answer is told once; Pending tells nothing."""

from __future__ import annotations

from typing import Any

from muster.cluster.backend import ClusterChange
from muster.watcher.handlers import handler_for, on_kueue_workload, on_workload_object
from muster.watcher.translate import active_change, check_updates


def workload(*checks: dict[str, Any], owner: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "job-train-1a2b3", "namespace": "ml", "uid": "u1"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "j", "controller": True}
        ]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": meta,
        "status": {"admissionChecks": list(checks)},
    }


def check(name: str, state: str, at: str = "2026-01-01T00:00:05Z", **kw: Any) -> dict[str, Any]:
    return {"name": name, "state": state, "lastTransitionTime": at, **kw}


def told(obj: dict[str, Any], sent: dict[str, str]) -> list[tuple[str, str, str]]:
    """(check, state, message) of each event, and `sent` moved on as the watcher does."""
    out = []
    for answer in check_updates(obj, sent):
        sent[answer.name] = answer.mark
        if answer.event is not None:
            payload = answer.event.payload
            assert answer.event.workload == "ml/job-train-1a2b3"
            out.append((payload.check, payload.state, payload.message))
    return out


def test_each_answer_is_told_once_and_pending_entries_tell_nothing() -> None:
    sent: dict[str, str] = {}
    assert told(workload(check("prov", "Pending"), check("budget", "Pending")), sent) == []
    assert set(sent) == {"prov", "budget"}
    ready = workload(check("prov", "Ready", message="provisioned"), check("budget", "Pending"))
    assert told(ready, sent) == [("prov", "Ready", "provisioned")]
    assert told(ready, sent) == []  # the same answer seen again (a resumed watch)
    # muster resets it after an eviction: Pending after Ready is news
    reset = workload(check("prov", "Pending", "2026-01-01T00:01:00Z", message="Reset"))
    assert told(reset, sent) == [("prov", "Pending", "Reset")]
    again = workload(check("prov", "Ready", "2026-01-01T00:02:00Z"))
    assert told(again, sent) == [("prov", "Ready", "")]


def test_answers_get_ids_that_differ_per_answer_and_repeat_for_the_same_one() -> None:
    first = check_updates(workload(check("prov", "Retry", retryCount=0)), {})
    same = check_updates(workload(check("prov", "Retry", retryCount=0)), {})
    later = check_updates(workload(check("prov", "Retry", "2026-01-01T00:09:00Z")), {})
    ids = [a.event.id_key for a in (*first, *same, *later) if a.event is not None]
    assert ids[0] == ids[1] != ids[2]


def test_an_answer_carries_when_its_entry_changed_state_for_a_retry_to_count_from() -> None:
    """Kueue counts a Retry's requeueAfterSeconds from the entry's lastTransitionTime: the
    event carries it (Unix ns); one unreadable or past int64 nanoseconds carries 0 (admission
    counts from the event's time, as before the field)."""
    carried: dict[str, int] = {}
    for at in ("2026-01-01T00:00:05Z", "yesterday", "9999-12-31T23:59:59Z", "missing"):
        entry = check("prov", "Retry", at, requeueAfterSeconds=9)
        if at == "missing":
            del entry["lastTransitionTime"]
        (answer,) = check_updates(workload(entry), {})
        assert answer.event is not None
        carried[at] = answer.event.payload.transitioned_unix_nano
    assert carried == {
        "2026-01-01T00:00:05Z": 1_767_225_605 * 10**9,
        "yesterday": 0,
        "9999-12-31T23:59:59Z": 0,
        "missing": 0,
    }


def change(obj: dict[str, Any]) -> ClusterChange:
    return ClusterChange(kind="Workload", type="MODIFIED", key="k", obj=obj, revision=1)


def test_a_jobs_workload_is_read_for_its_checks_only() -> None:
    assert handler_for(change(workload(check("prov", "Ready"), owner="train"))) is (
        on_kueue_workload
    )
    assert handler_for(change(workload())) is on_workload_object
    gang = {"kind": "Workload", "apiVersion": "scheduling.k8s.io/v1alpha1", "metadata": {}}
    assert handler_for(change(gang)) is None


def _active(obj: dict[str, Any], active: bool) -> dict[str, Any]:
    return {**obj, "spec": {"active": active, "queueName": "lq"}}


def test_spec_active_is_told_when_it_changes_and_a_first_sight_tells_little() -> None:
    jobs, bare = workload(owner="train"), workload()
    # A Job's Workload is created active: first seen inactive, someone stopped it.
    first = active_change(_active(jobs, False), None)
    assert first is not None
    assert first.payload.active is False
    assert active_change(_active(jobs, True), None) is None
    # A Workload of its own carries spec.active in its `submitted`: nothing more to tell.
    assert active_change(_active(bare, False), None) is None
    changed = active_change(_active(bare, True), False)
    assert changed is not None
    assert (changed.field, changed.payload.active) == (
        "active_changed",
        True,
    )
    assert active_change(bare, True) is None  # absent: active
    assert active_change({**bare, "spec": "odd"}, True) is None
