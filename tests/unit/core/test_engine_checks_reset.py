"""When check states start over (Kueue's evict.resetChecksOnEviction, its only reset): a Ready
told since the workload's last eviction, while its pods stop or it waits for quota, stays in
Kueue's status.admissionChecks, and the next reservation is admitted at once with it
(scheduler.prepareWorkload: all checks Ready). One told before the eviction does not count."""

from __future__ import annotations

import pytest
from test_engine_checks import _admitted, _engine
from test_engine_lifecycle import A, _kinds, _wl

from muster.api.model import AdmissionCheck, ObjectMeta
from muster.api.wellknown import MULTIKUEUE_CONTROLLER
from muster.core.engine import Engine
from muster.core.events import EventType

RESERVED_AND_ADMITTED = [(EventType.QUOTA_RESERVED, "ns/a"), (EventType.ADMITTED, "ns/a")]


def test_a_ready_told_while_its_pods_stop_admits_the_next_reservation_at_once() -> None:
    engine = _engine()
    _admitted(engine)
    engine.set_active(A, False, now_s=5)  # evicted; its pods stop
    assert engine.set_admission_check(A, "prov", "Ready", now_s=6) == []  # a late answer
    engine.stopped(A, now_s=7)
    engine.set_active(A, True, now_s=8)
    assert _kinds(engine.schedule(now_s=8)) == RESERVED_AND_ADMITTED


def test_a_ready_told_while_queued_again_admits_the_next_reservation_at_once() -> None:
    engine = _engine()
    _admitted(engine)
    engine.set_admission_check(A, "prov", "Retry", now_s=5)
    assert _kinds(engine.stopped(A, now_s=6)) == [(EventType.REQUEUED, "ns/a")]
    engine.set_admission_check(A, "prov", "Ready", now_s=6)
    assert _kinds(engine.schedule(now_s=6)) == RESERVED_AND_ADMITTED


def test_a_ready_told_before_the_eviction_is_reset_by_it() -> None:
    engine = _engine()
    _admitted(engine)  # prov said Ready for the first reservation
    engine.set_admission_check(A, "prov", "Retry", now_s=5)
    engine.stopped(A, now_s=6)
    assert _kinds(engine.schedule(now_s=6)) == [(EventType.QUOTA_RESERVED, "ns/a")]
    assert engine.state.records[A].checks == {"prov": "Pending"}


def test_a_pending_told_after_a_ready_takes_it_back() -> None:
    engine = _engine()
    _admitted(engine)
    engine.set_active(A, False, now_s=5)
    engine.set_admission_check(A, "prov", "Ready", now_s=6)
    engine.set_admission_check(A, "prov", "Pending", now_s=6)
    engine.stopped(A, now_s=7)
    engine.set_active(A, True, now_s=8)
    assert _kinds(engine.schedule(now_s=8)) == [(EventType.QUOTA_RESERVED, "ns/a")]


def _told_while_queued(check: str) -> Engine:
    engine = _engine()
    mk = AdmissionCheck(meta=ObjectMeta(name="mk"), controller_name=MULTIKUEUE_CONTROLLER)
    engine.apply(mk, now_s=0)
    engine.submit(_wl("a", cpu=4), now_s=0)
    engine.set_admission_check(A, check, "Ready", now_s=1)
    return engine


def test_deactivating_a_queued_workload_resets_what_its_checks_told() -> None:
    engine = _told_while_queued("prov")
    engine.set_active(A, False, now_s=2)  # Kueue evicts it, though it holds nothing
    engine.set_active(A, True, now_s=3)
    assert _kinds(engine.schedule(now_s=3)) == [(EventType.QUOTA_RESERVED, "ns/a")]


@pytest.mark.parametrize("check", ["nosuch", "mk"])
def test_a_check_the_configuration_does_not_have_and_multikueue_s_are_not_kept(
    check: str,
) -> None:
    """MultiKueue's Ready says a worker admitted that reservation: each is dispatched anew."""
    engine = _told_while_queued(check)
    assert engine.state.records[A].told_checks == {}


def test_each_eviction_by_a_retry_counts_one_and_one_finding_it_ready_starts_over() -> None:
    """Kueue's retryCount (resetChecksOnEviction): shown in the workload's status while queued
    too, as Kueue keeps the entry Pending with its count (task checks3)."""
    engine = _engine()
    _admitted(engine)
    engine.set_admission_check(A, "prov", "Retry", now_s=5)
    engine.stopped(A, now_s=6)
    assert [(c.name, c.state, c.retry_count) for c in engine.workload(A).admission_checks] == [
        ("prov", "Pending", 1)
    ]
    engine.schedule(now_s=6)  # reserved again, prov Pending
    engine.set_admission_check(A, "prov", "Retry", now_s=7)
    engine.stopped(A, now_s=8)
    engine.schedule(now_s=8)
    assert engine.state.records[A].retry_counts == {"prov": 2}
    engine.set_admission_check(A, "prov", "Ready", now_s=9)
    engine.set_active(A, False, now_s=10)  # an eviction that finds it Ready
    assert engine.state.records[A].retry_counts == {}


def test_a_queued_workload_shows_what_its_counted_check_told_since() -> None:
    engine = _engine()
    _admitted(engine)
    engine.set_admission_check(A, "prov", "Retry", now_s=5)
    engine.stopped(A, now_s=6)  # queued again, prov Pending with 1 retry
    engine.set_admission_check(A, "prov", "Retry", now_s=6)  # and no again: set aside
    assert [(c.name, c.state, c.retry_count) for c in engine.workload(A).admission_checks] == [
        ("prov", "Retry", 1)
    ]
