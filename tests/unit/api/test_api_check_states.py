"""Kueue's rules for a Workload's `status.admissionChecks` (`muster.api.check_states`)."""

from __future__ import annotations

from muster.api.check_states import (
    ChecksWanted,
    entries_of,
    format_time,
    parse_time,
    reset_after_eviction,
    set_state,
    sync_required,
    wanted_entries,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def entry(name: str, state: str, at_s: float, **fields: object) -> dict[str, object]:
    return {"name": name, "state": state, "lastTransitionTime": format_time(at_s), **fields}


def test_times_are_whole_seconds_in_utc_and_bad_ones_read_as_none() -> None:
    assert format_time(T0 + 0.9) == "2026-01-01T00:00:00Z"
    assert parse_time("2026-01-01T00:00:30Z") == T0 + 30
    assert parse_time("2026-01-01T00:00:30.250000Z") == T0 + 30  # a MicroTime
    assert parse_time("yesterday") is None
    assert parse_time(None) is None


def test_a_reservation_adds_missing_checks_pending_keeps_others_and_drops_the_rest() -> None:
    stored = [entry("prov", "Ready", T0, message="ok"), entry("gone", "Retry", T0)]
    synced = sync_required(stored, ["prov", "budget"], now=format_time(T0 + 9))
    assert synced == [
        {"name": "budget", "state": "Pending", "lastTransitionTime": format_time(T0 + 9),
         "message": ""},
        entry("prov", "Ready", T0, message="ok"),
    ]  # fmt: skip
    assert sync_required(stored, [], now="x") == []


def test_an_eviction_resets_what_was_set_until_then_and_counts_retries() -> None:
    stored: list[dict[str, object]] = [
        entry("a", "Retry", T0, retryCount=2, requeueAfterSeconds=120, message="no room"),
        entry("b", "Ready", T0 + 10, podSetUpdates=[{"name": "main"}]),
        entry("c", "Ready", T0 + 11),  # after the eviction: a newer reservation's answer
        entry("d", "Pending", T0),
        {"name": "e", "state": "Rejected", "lastTransitionTime": "garbled"},
    ]
    reset = reset_after_eviction(stored, evicted_at_s=T0 + 10.7, now="NOW")
    by_name = {e["name"]: e for e in reset}
    assert by_name["a"] == {
        "name": "a",
        "state": "Pending",
        "lastTransitionTime": "NOW",
        "message": "Reset to Pending after eviction. Previously: Retry",
        "retryCount": 3,
        "requeueAfterSeconds": 120,
    }
    assert by_name["b"]["state"] == "Pending"
    assert "podSetUpdates" not in by_name["b"]
    assert by_name["c"] == stored[2]
    assert by_name["d"] == stored[3]
    assert by_name["e"]["state"] == "Pending"
    assert reset_after_eviction(stored, evicted_at_s=0, now="NOW") == stored


def test_an_eviction_that_finds_a_check_ready_or_rejected_starts_its_count_over() -> None:
    """Kueue's resetChecksOnEviction sets retryCount only for a Retry (one more); a Ready or
    Rejected reset leaves it unset, a Pending one keeps it (task checks3)."""
    stored: list[dict[str, object]] = [
        entry("ready", "Ready", T0, retryCount=2),
        entry("rejected", "Rejected", T0, retryCount=1),
        entry("pending", "Pending", T0, retryCount=4),
    ]
    reset = {e["name"]: e for e in reset_after_eviction(stored, evicted_at_s=T0, now="NOW")}
    assert "retryCount" not in reset["ready"]
    assert "retryCount" not in reset["rejected"]
    assert reset["pending"]["retryCount"] == 4


def test_setting_a_state_moves_its_transition_time_only_when_it_changes() -> None:
    stored = [entry("prov", "Pending", T0)]
    same = set_state(stored, "prov", "Pending", now="LATER", message="ETA 5m")
    assert same[0]["lastTransitionTime"] == format_time(T0)
    assert same[0]["message"] == "ETA 5m"
    ready = set_state(same, "prov", "Ready", now="LATER", podSetUpdates=[{"name": "main"}])
    assert (ready[0]["lastTransitionTime"], ready[0]["message"]) == ("LATER", "")
    cleared = set_state(ready, "prov", "Ready", now="X", podSetUpdates=None)
    assert "podSetUpdates" not in cleared[0]
    added = set_state([], "other", "Retry", now="NOW", requeueAfterSeconds=60)
    assert added == [
        {"name": "other", "state": "Retry", "lastTransitionTime": "NOW", "message": "",
         "requeueAfterSeconds": 60}
    ]  # fmt: skip
    assert stored == [entry("prov", "Pending", T0)]  # inputs are never changed


def test_the_list_muster_writes_syncs_then_resets() -> None:
    status = {"admissionChecks": [entry("prov", "Ready", T0), "junk", {"state": "Ready"}]}
    stored = entries_of(status)
    assert stored == [entry("prov", "Ready", T0)]
    wanted = ChecksWanted(names=("prov", "budget"), evicted_at_s=T0 + 1)
    unknown = wanted_entries(stored, wanted, now_s=T0 + 2, written=None)
    assert [(e["name"], e["state"]) for e in unknown] == [
        ("budget", "Pending"),
        ("prov", "Pending"),
    ]
    assert entries_of(None) == []
    assert entries_of({"admissionChecks": "x"}) == []


def test_a_writer_that_knows_its_last_write_resets_every_answer_once_per_eviction() -> None:
    later = [entry("prov", "Ready", T0 + 50)]  # set after the eviction, by a fast clock
    evicted = ChecksWanted(names=("prov",), evicted_at_s=T0 + 10)
    before = ChecksWanted(names=("prov",))
    # Not written yet: every answer found is older than the next reservation.
    (reset,) = wanted_entries(later, evicted, now_s=T0 + 11, written=before)
    assert reset["state"] == "Pending"
    # Written already: the answer is the next reservation's.
    assert wanted_entries(later, evicted, now_s=T0 + 60, written=evicted) == later
    # Not known (a restart): only answers set until the eviction.
    assert wanted_entries(later, evicted, now_s=T0 + 60, written=None) == later
