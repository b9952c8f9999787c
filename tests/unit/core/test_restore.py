"""A restarted admission service replays its recorded decisions and ends where it was."""

from __future__ import annotations

import pytest

from muster.api.model import (
    Admission,
    ApiObject,
    ClusterQueue,
    FlavorQuotas,
    KueueConfig,
    LabelSelector,
    LocalQueue,
    ObjectMeta,
    PodSet,
    Preemption,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    WithinClusterQueue,
    Workload,
    WorkloadKey,
)
from muster.core.engine import Engine
from muster.core.events import Event, EventType


def _objects() -> list[ApiObject]:
    group = ResourceGroup(
        covered_resources=("cpu",),
        flavors=(
            FlavorQuotas(name="f", resources=(ResourceQuota(name="cpu", nominal_quota=4000),)),
        ),
    )
    return [
        ResourceFlavor(meta=ObjectMeta(name="f")),
        ClusterQueue(
            meta=ObjectMeta(name="cq"),
            namespace_selector=LabelSelector(),
            resource_groups=(group,),
            preemption=Preemption(within_cluster_queue=WithinClusterQueue.LOWER_PRIORITY),
        ),
        LocalQueue(meta=ObjectMeta(name="lq", namespace="ns"), cluster_queue="cq"),
    ]


def _wl(name: str, cpu: int, priority: int) -> Workload:
    return Workload(
        meta=ObjectMeta(name=name, namespace="ns", uid=name),
        queue_name="lq",
        priority=priority,
        pod_sets=(PodSet(name="main", count=1, requests={"cpu": cpu * 1000}),),
    )


def test_replaying_recorded_decisions_rebuilds_queues_usage_and_evictions() -> None:
    live = Engine(_objects(), hold_quota_until_stopped=True)
    log: list[tuple[str, Workload]] = []
    events: list[Event] = []
    for t, wl in enumerate([_wl("a", 3, 0), _wl("b", 2, 0), _wl("urgent", 3, 10)]):
        live.submit(wl, now_s=t)
        log.append(("submit", wl))
        events += live.schedule(now_s=t)
    kinds = [(e.type, e.object) for e in events]
    assert (EventType.EVICTED, "ns/a") in kinds  # urgent preempts a; a keeps quota meanwhile

    rebuilt = Engine(_objects(), hold_quota_until_stopped=True)
    for _, wl in log:
        rebuilt.submit(wl, now_s=0)
    for e in events:
        key = WorkloadKey(e.object)
        if e.type is EventType.QUOTA_RESERVED:
            admission = live.admission(key)
            assert admission is not None or key == "ns/a"
            rebuilt.restore_reserved(
                key, admission or _admission_of_a(live), checks=(), now_s=e.time
            )
        elif e.type is EventType.ADMITTED:
            rebuilt.restore_admitted(key, now_s=e.time)
        elif e.type is EventType.PENDING:
            rebuilt.restore_pending(key, reason=e.reason, message=e.message)
        elif e.type is EventType.EVICTED:
            rebuilt.restore_evicted(key, reason=e.reason, message=e.message, now_s=e.time)

    for name in ("ns/a", "ns/b", "ns/urgent"):
        key = WorkloadKey(name)
        assert rebuilt.holds_quota(key) == live.holds_quota(key), name
    assert rebuilt.cluster_queue_status("cq") == live.cluster_queue_status("cq")
    # Once a's pods are gone, both engines admit urgent the same way.
    assert [(e.type, e.object) for e in rebuilt.stopped(WorkloadKey("ns/a"), now_s=5)] == [
        (e.type, e.object) for e in live.stopped(WorkloadKey("ns/a"), now_s=5)
    ]
    assert [(e.type, e.object) for e in rebuilt.schedule(now_s=5)] == [
        (e.type, e.object) for e in live.schedule(now_s=5)
    ]


def _admission_of_a(live: Engine) -> Admission:
    """a is being evicted: its admission is still held."""
    admission = live.workload(WorkloadKey("ns/a")).admission
    assert admission is not None
    return admission


def test_removing_a_local_queue_leaves_new_workloads_waiting_with_the_reason() -> None:
    engine = Engine(_objects())
    engine.remove("LocalQueue", "lq", namespace="ns", now_s=0)
    engine.submit(_wl("late", 1, 0), now_s=1)
    engine.schedule(now_s=1)

    conditions = {c.type: c for c in engine.workload(WorkloadKey("ns/late")).conditions}
    assert conditions.keys() == {"QuotaReserved", "Admitted"}
    assert conditions["QuotaReserved"].status == "False"
    assert conditions["QuotaReserved"].message == "LocalQueue lq doesn't exist"
    # Kueue's SyncAdmittedCondition, with UnadmittedWorkloadsObservability on (its default).
    assert (conditions["Admitted"].status, conditions["Admitted"].reason) == (
        "False",
        "NoReservation",
    )
    assert engine.remove("LocalQueue", "lq", namespace="ns", now_s=2) == []


def _two_low_and_urgent(granular: bool) -> tuple[Engine, list[Event]]:
    """a and b (2 cpu each, priority 0) fill cq; urgent (2 cpu, priority 10) preempts one."""
    live = Engine(
        _objects(),
        config=KueueConfig(granular_pending_reasons=granular),
        hold_quota_until_stopped=True,
    )
    events: list[Event] = []
    for t, wl in enumerate([_wl("a", 2, 0), _wl("b", 2, 0), _wl("urgent", 2, 10)]):
        live.submit(wl, now_s=t)
        events += live.schedule(now_s=t)
    return live, events


@pytest.mark.parametrize("granular", [True, False], ids=["granular", "fallback-reason"])
def test_restored_preemptor_waits_for_its_victim_without_preempting_again(granular: bool) -> None:
    live, events = _two_low_and_urgent(granular)
    (victim,) = [WorkloadKey(e.object) for e in events if e.type is EventType.PREEMPTED]
    (waiting,) = [e for e in events if e.type is EventType.PENDING and e.object == "ns/urgent"]
    assert waiting.message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f, "
        "2 more needed. Pending the preemption of 1 workload(s)"
    )

    rebuilt = Engine(_objects(), config=live.config.kueue, hold_quota_until_stopped=True)
    for name in ("a", "b", "urgent"):
        rebuilt.submit(_wl(name, 2, 10 if name == "urgent" else 0), now_s=0)
    for name in ("ns/a", "ns/b"):
        key = WorkloadKey(name)
        admission = live.workload(key).admission
        assert admission is not None
        rebuilt.restore_reserved(key, admission, checks=(), now_s=0)
        rebuilt.restore_admitted(key, now_s=0)
    rebuilt.restore_evicted(victim, reason="Preempted", message="preempted", now_s=2)
    rebuilt.restore_pending(
        WorkloadKey("ns/urgent"), reason=waiting.reason, message=waiting.message
    )

    # The other low-priority workload could be preempted too: the rebuilt engine must not.
    assert rebuilt.schedule(now_s=3) == []
    assert rebuilt.phase(WorkloadKey("ns/urgent")) == "Pending"
    assert [(e.type, e.object) for e in rebuilt.stopped(victim, now_s=4)] == [
        (EventType.REQUEUED, victim)
    ]
    admitted = rebuilt.schedule(now_s=4)
    assert [(e.type, e.object) for e in admitted][:2] == [
        (EventType.QUOTA_RESERVED, "ns/urgent"),
        (EventType.ADMITTED, "ns/urgent"),
    ]
    live.stopped(victim, now_s=4)
    assert admitted == live.schedule(now_s=4)  # as the live engine decides
