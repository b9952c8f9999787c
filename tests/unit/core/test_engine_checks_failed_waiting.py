"""A check's Retry or Rejected told while the workload holds no quota (task checkverdicts).

Kueue's workload controller acts on them only while the workload holds quota
(reconcileCheckBasedEviction), so a queued one is neither deactivated nor evicted; but they
stay in its status.admissionChecks (only an eviction resets them), and its scheduler's
nominate leaves it inadmissible, "The workload has failed admission checks", until the check
says otherwise."""

from __future__ import annotations

import pytest
from test_engine_checks import _admitted, _engine
from test_engine_lifecycle import A, _kinds, _wl

from muster.api.model import WorkloadKey
from muster.core.engine import Engine
from muster.core.events import EventType
from muster.core.heads import FAILED_CHECKS

B = WorkloadKey("ns/b")
RESERVED_AND_ADMITTED = [(EventType.QUOTA_RESERVED, "ns/a"), (EventType.ADMITTED, "ns/a")]


def _queued_and_failed(state: str) -> Engine:
    """`a` waits for quota `b` holds; prov tells `state` about it meanwhile."""
    engine = _engine()
    _admitted(engine, "b")
    engine.submit(_wl("a", cpu=4), now_s=2)
    engine.schedule(now_s=2)
    assert engine.set_admission_check(A, "prov", state, now_s=3) == []
    return engine


def _free_quota(engine: Engine) -> None:
    """`b` stopped and gone by 5 s: its quota is free for `a`."""
    engine.set_active(B, False, now_s=4)
    engine.stopped(B, now_s=5)


@pytest.mark.parametrize("state", ["Rejected", "Retry"])
def test_a_failed_check_told_while_queued_keeps_it_unreserved_when_quota_is_freed(
    state: str,
) -> None:
    engine = _queued_and_failed(state)
    _free_quota(engine)
    events = engine.schedule(now_s=5)
    assert [(e.type, e.message) for e in events if e.object == A] == [
        (EventType.PENDING, FAILED_CHECKS)
    ]
    assert engine.phase(A) == "Pending"  # not deactivated: Kueue acts only with quota
    assert engine.state.records[A].wl.active


@pytest.mark.parametrize(("state", "then"), [("Rejected", "Ready"), ("Retry", "Pending")])
def test_the_check_saying_otherwise_puts_it_back_in_its_turn(state: str, then: str) -> None:
    engine = _queued_and_failed(state)
    _free_quota(engine)
    engine.schedule(now_s=5)
    engine.set_admission_check(A, "prov", then, now_s=6)
    expected = RESERVED_AND_ADMITTED if then == "Ready" else RESERVED_AND_ADMITTED[:1]
    assert _kinds(engine.schedule(now_s=6)) == expected


def test_deactivating_it_resets_the_failed_check() -> None:
    engine = _queued_and_failed("Rejected")
    _free_quota(engine)
    engine.set_active(A, False, now_s=6)  # Kueue evicts it, though it holds nothing
    engine.set_active(A, True, now_s=7)
    assert _kinds(engine.schedule(now_s=7)) == [(EventType.QUOTA_RESERVED, "ns/a")]


@pytest.mark.parametrize("state", ["Rejected", "Retry"])
def test_a_failed_check_told_while_inactive_sets_it_aside_once_reactivated(state: str) -> None:
    """Kueue resets nothing at reactivation: what a check told while the workload was inactive
    stays in its status, and its scheduler leaves it unreserved (task checks3)."""
    engine = _engine()
    _admitted(engine)
    engine.set_active(A, False, now_s=5)  # evicted (its checks reset); its pods stop
    engine.stopped(A, now_s=6)
    assert engine.set_admission_check(A, "prov", state, now_s=7) == []
    assert engine.phase(A) == "Inactive"
    engine.set_active(A, True, now_s=8)
    events = engine.schedule(now_s=8)
    assert [(e.type, e.message) for e in events if e.object == A] == [
        (EventType.PENDING, FAILED_CHECKS)
    ]
    engine.set_admission_check(A, "prov", "Ready", now_s=9)
    assert _kinds(engine.schedule(now_s=9)) == RESERVED_AND_ADMITTED


def test_stopping_a_workload_evicted_already_keeps_the_failed_check() -> None:
    """Evicted and queued again, it is not evicted once more when stopped (Kueue's workload
    controller evicts only one not evicted since its reservation): the Retry stays."""
    engine = _engine()
    _admitted(engine)
    engine.set_admission_check(A, "prov", "Retry", now_s=5)  # evicted
    engine.stopped(A, now_s=6)
    engine.set_admission_check(A, "prov", "Retry", now_s=6)  # told again once queued
    engine.set_active(A, False, now_s=7)
    engine.set_active(A, True, now_s=8)
    events = engine.schedule(now_s=8)
    assert [(e.type, e.message) for e in events if e.object == A] == [
        (EventType.PENDING, FAILED_CHECKS)
    ]


def test_a_retry_told_while_inactive_holds_it_out_after_reactivation_until_its_end() -> None:
    """Kueue clears requeueState while inactive, but once reactivated NeedsRequeueAtUpdate sets
    requeueAt again from the Retry still in status (lastTransitionTime + requeueAfterSeconds):
    the check saying Ready before then does not put it back in its queue (task leftovers3)."""
    engine = _engine()
    _admitted(engine)
    engine.set_active(A, False, now_s=5)
    engine.stopped(A, now_s=6)
    engine.set_admission_check(A, "prov", "Retry", requeue_after_s=60, since_s=7, now_s=8)
    engine.set_active(A, True, now_s=10)
    assert engine.phase(A) == "Backoff"  # requeueAt 67
    engine.set_admission_check(A, "prov", "Ready", now_s=11)  # the check leaves Retry
    assert engine.schedule(now_s=66) == []
    events = engine.schedule(now_s=67)
    assert [(e.type, e.reason) for e in events][:1] == [(EventType.REQUEUED, "BackoffFinished")]
    assert _kinds(events[1:]) == RESERVED_AND_ADMITTED


def test_a_retry_whose_end_passed_while_inactive_or_which_said_otherwise_holds_nothing() -> None:
    engine = _engine()
    _admitted(engine)
    engine.set_active(A, False, now_s=5)
    engine.stopped(A, now_s=6)
    engine.set_admission_check(A, "prov", "Retry", requeue_after_s=60, since_s=7, now_s=8)
    engine.set_admission_check(A, "prov", "Ready", now_s=9)  # not in Retry at reactivation
    engine.set_active(A, True, now_s=10)
    assert _kinds(engine.schedule(now_s=10)) == RESERVED_AND_ADMITTED

    engine.set_active(A, False, now_s=20)
    engine.stopped(A, now_s=21)
    engine.set_admission_check(A, "prov", "Retry", requeue_after_s=5, since_s=22, now_s=22)
    engine.set_active(A, True, now_s=30)  # 27 has passed: only the failed check holds it
    assert engine.phase(A) == "Pending"
