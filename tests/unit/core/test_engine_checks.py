"""Admission check answers through the engine: Ready admits; Retry and Rejected evict,
before admission and after it (Kueue's workload controller), with Kueue's wording."""

from __future__ import annotations

import msgspec
from test_engine_lifecycle import A, _cq, _kinds, _wl

from muster.api.model import (
    AdmissionCheck,
    AdmissionCheckStrategyRule,
    ApiObject,
    LocalQueue,
    ObjectMeta,
    ResourceFlavor,
    WorkloadKey,
)
from muster.core.engine import Engine
from muster.core.events import EventType

B = WorkloadKey("ns/b")
C = WorkloadKey("ns/c")


def _engine() -> Engine:
    checked = msgspec.structs.replace(
        _cq("cq"), admission_checks=(AdmissionCheckStrategyRule(name="prov"),)
    )
    objects: list[ApiObject] = [
        ResourceFlavor(meta=ObjectMeta(name="f")),
        AdmissionCheck(meta=ObjectMeta(name="prov"), controller_name="example.com/prov"),
        checked,
        LocalQueue(meta=ObjectMeta(name="lq", namespace="ns"), cluster_queue="cq"),
    ]
    return Engine(objects, hold_quota_until_stopped=True)


def _admitted(engine: Engine, name: str = "a") -> None:
    engine.submit(_wl(name, cpu=4), now_s=0)
    assert _kinds(engine.schedule(now_s=0)) == [(EventType.QUOTA_RESERVED, f"ns/{name}")]
    admitted = engine.set_admission_check(WorkloadKey(f"ns/{name}"), "prov", "Ready", now_s=1)
    assert _kinds(admitted) == [(EventType.ADMITTED, f"ns/{name}")]


def test_retry_after_admission_evicts_and_the_check_s_requeue_after_keeps_it_out() -> None:
    engine = _engine()
    _admitted(engine)
    engine.submit(_wl("b", cpu=4), now_s=2)

    (evicted,) = engine.set_admission_check(
        A, "prov", "Retry", message="capacity gone", requeue_after_s=60, now_s=10
    )
    assert (evicted.type, evicted.reason, evicted.message) == (
        EventType.EVICTED,
        "AdmissionCheck",
        'Evicted due to AdmissionCheck in Retry state: "prov" (capacity gone)',
    )
    assert engine.holds_quota(A)  # until its pods are gone
    assert engine.stopped(A, now_s=12) == []  # not requeued before 70 s
    assert engine.phase(A) == "Backoff"
    assert _kinds(engine.schedule(now_s=12)) == [(EventType.QUOTA_RESERVED, "ns/b")]

    engine.finish(B, now_s=20)
    assert engine.schedule(now_s=69) == []
    requeued = [e for e in engine.schedule(now_s=70) if e.type is EventType.REQUEUED]
    assert [(e.object, e.reason) for e in requeued] == [("ns/a", "BackoffFinished")]


def test_retry_without_requeue_after_requeues_once_the_pods_are_gone() -> None:
    engine = _engine()
    _admitted(engine)
    engine.set_admission_check(A, "prov", "Retry", now_s=10)
    assert _kinds(engine.stopped(A, now_s=11)) == [(EventType.REQUEUED, "ns/a")]
    assert _kinds(engine.schedule(now_s=11)) == [(EventType.QUOTA_RESERVED, "ns/a")]


def test_rejected_after_admission_deactivates_once_the_pods_are_gone() -> None:
    engine = _engine()
    _admitted(engine)
    engine.submit(_wl("b", cpu=4), now_s=2)

    (evicted,) = engine.set_admission_check(
        A, "prov", "Rejected", message="CapacityRevoked", now_s=10
    )
    assert (evicted.type, evicted.reason, evicted.message) == (
        EventType.EVICTED,
        "DeactivatedDueToAdmissionCheck",
        'The workload is deactivated due to AdmissionCheck in Rejected state: "prov" '
        "(CapacityRevoked)",
    )
    assert engine.holds_quota(A)
    waiting = engine.schedule(now_s=10)  # no room for b while a's pods still run
    assert [(e.type, e.object) for e in waiting] == [(EventType.PENDING, "ns/b")]
    assert engine.stopped(A, now_s=11) == []
    assert engine.phase(A) == "Inactive"
    assert _kinds(engine.schedule(now_s=11)) == [(EventType.QUOTA_RESERVED, "ns/b")]
    assert engine.set_active(A, True, now_s=12)[0].reason == "Reactivated"


def test_rejected_before_admission_gives_its_quota_back_at_once() -> None:
    engine = _engine()
    engine.submit(_wl("a", cpu=4), now_s=0)
    engine.schedule(now_s=0)
    events = engine.set_admission_check(A, "prov", "Rejected", now_s=1)
    assert [(e.type, e.reason) for e in events] == [
        (EventType.EVICTED, "AdmissionCheck"),
        (EventType.DEACTIVATED, "AdmissionCheck"),
    ]
    assert events[1].message == (
        'The workload is deactivated due to AdmissionCheck in Rejected state: "prov"'
    )
    assert not engine.holds_quota(A)


def test_an_answer_while_being_evicted_changes_nothing() -> None:
    engine = _engine()
    _admitted(engine)
    engine.set_admission_check(A, "prov", "Retry", now_s=10)
    assert engine.set_admission_check(A, "prov", "Rejected", now_s=11) == []
    assert _kinds(engine.stopped(A, now_s=12)) == [(EventType.REQUEUED, "ns/a")]


def test_workloads_without_checks_share_one_empty_map_that_no_answer_writes_to() -> None:
    engine = _engine()
    _admitted(engine)  # holds all the quota: the next ones wait
    engine.submit(_wl("b", cpu=4), now_s=2)
    engine.submit(_wl("c", cpu=4), now_s=2)
    records = engine.state.records
    assert records[B].checks is records[C].checks  # 64 bytes each at a million pending

    assert engine.set_admission_check(B, "prov", "Pending", now_s=3) == []  # kept for later
    assert records[C].told_checks == {}  # the shared map was not written to
    engine.finish(A, now_s=4)
    assert (EventType.QUOTA_RESERVED, "ns/b") in _kinds(engine.schedule(now_s=4))
    assert (records[B].checks, records[C].checks) == ({"prov": "Pending"}, {})
    engine.set_admission_check(B, "prov", "Ready", now_s=5)
    assert (records[B].checks, records[C].checks) == ({"prov": "Ready"}, {})
