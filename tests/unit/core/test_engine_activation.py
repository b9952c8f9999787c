"""spec.active through the engine: kueuectl's stop and resume of a workload."""

from __future__ import annotations

from test_engine_lifecycle import A, _engine, _kinds, _wl

from muster.api.model import WorkloadKey
from muster.core.events import EventType

B = WorkloadKey("ns/b")


def test_stopping_an_admitted_workload_evicts_it_and_it_stays_inactive_once_stopped() -> None:
    engine = _engine(hold=True)
    engine.submit(_wl("a", cpu=4), now_s=0)
    engine.submit(_wl("b", cpu=4), now_s=0)
    engine.schedule(now_s=0)

    (evicted,) = engine.set_active(A, False, now_s=1)
    assert (evicted.type, evicted.reason) == (EventType.EVICTED, "Deactivated")
    assert engine.holds_quota(A)  # until its pods are gone
    assert engine.stopped(A, now_s=2) == []  # no Requeued: it waits to be resumed
    assert engine.phase(A) == "Inactive"
    assert _kinds(engine.schedule(now_s=2)) == [
        (EventType.QUOTA_RESERVED, "ns/b"),
        (EventType.ADMITTED, "ns/b"),
    ]


def test_stopping_a_pending_workload_takes_it_off_the_queue_and_resume_puts_it_back() -> None:
    engine = _engine(hold=True)
    engine.submit(_wl("b", cpu=4), now_s=0)
    engine.submit(_wl("a", cpu=4), now_s=0)
    engine.schedule(now_s=0)
    assert engine.phase(A) == "Pending"

    assert engine.set_active(A, False, now_s=1) == []
    assert engine.phase(A) == "Inactive"
    assert [p.key for p in engine.pending_workloads("cq")] == []
    engine.finish(B, now_s=2)
    assert engine.schedule(now_s=2) == []  # room, but it is stopped

    (requeued,) = engine.set_active(A, True, now_s=3)
    assert (requeued.type, requeued.reason) == (EventType.REQUEUED, "Reactivated")
    assert _kinds(engine.schedule(now_s=3)) == [
        (EventType.QUOTA_RESERVED, "ns/a"),
        (EventType.ADMITTED, "ns/a"),
    ]


def test_resuming_a_running_workload_or_stopping_a_finished_one_changes_nothing() -> None:
    engine = _engine(hold=True)
    engine.submit(_wl("a"), now_s=0)
    engine.schedule(now_s=0)
    assert engine.set_active(A, True, now_s=1) == []
    engine.finish(A, now_s=2)
    assert engine.set_active(A, False, now_s=3) == []
    assert engine.phase(A) == "Finished"
