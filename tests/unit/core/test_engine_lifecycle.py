"""Engine calls a long-running service needs: evict from outside, forget, public reads."""

from __future__ import annotations

import pytest

from muster.api.model import (
    ApiObject,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    ObjectMeta,
    PodSet,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
    WorkloadKey,
)
from muster.core.engine import Engine
from muster.core.events import Event, EventType


def _cq(name: str, *, cpu: int = 4, cohort: str | None = None) -> ClusterQueue:
    group = ResourceGroup(
        covered_resources=("cpu",),
        flavors=(
            FlavorQuotas(
                name="f", resources=(ResourceQuota(name="cpu", nominal_quota=cpu * 1000),)
            ),
        ),
    )
    return ClusterQueue(
        meta=ObjectMeta(name=name),
        namespace_selector=LabelSelector(),
        resource_groups=(group,),
        cohort=cohort,
    )


def _engine(*, hold: bool = False) -> Engine:
    objects: list[ApiObject] = [
        ResourceFlavor(meta=ObjectMeta(name="f")),
        _cq("cq"),
        LocalQueue(meta=ObjectMeta(name="lq", namespace="ns"), cluster_queue="cq"),
    ]
    return Engine(objects, hold_quota_until_stopped=hold)


def _wl(name: str, cpu: int = 1, *, active: bool = True) -> Workload:
    return Workload(
        meta=ObjectMeta(name=name, namespace="ns", uid=name),
        queue_name="lq",
        active=active,
        pod_sets=(PodSet(name="main", count=1, requests={"cpu": cpu * 1000}),),
    )


def _kinds(events: list[Event]) -> list[tuple[EventType, str]]:
    return [(e.type, e.object) for e in events]


A = WorkloadKey("ns/a")


def test_evict_keeps_quota_until_stopped_when_quota_is_held_until_pods_stop() -> None:
    engine = _engine(hold=True)
    engine.submit(_wl("a"), now_s=0)
    engine.schedule(now_s=0)

    (evicted,) = engine.evict(A, reason="GangRejected", message="2 of 3 placed", now_s=1)
    assert (evicted.type, evicted.reason, evicted.message) == (
        EventType.EVICTED,
        "GangRejected",
        "2 of 3 placed",
    )
    assert engine.holds_quota(A)
    assert engine.evict(A, reason="GangRejected", message="again", now_s=2) == []
    assert _kinds(engine.stopped(A, now_s=3)) == [(EventType.REQUEUED, "ns/a")]
    assert not engine.holds_quota(A)


def test_evict_requeues_at_once_when_quota_is_not_held_until_pods_stop() -> None:
    engine = _engine()
    engine.submit(_wl("a"), now_s=0)
    engine.schedule(now_s=0)

    events = engine.evict(A, reason="GangRejected", message="gave up", now_s=1)
    assert _kinds(events) == [(EventType.EVICTED, "ns/a"), (EventType.REQUEUED, "ns/a")]
    assert engine.phase(A) == "Pending"


def test_evict_leaves_a_pending_or_unknown_workload_alone() -> None:
    engine = _engine()
    engine.submit(_wl("a", cpu=9), now_s=0)
    engine.schedule(now_s=0)
    assert engine.evict(A, reason="GangRejected", message="", now_s=1) == []
    assert engine.evict(WorkloadKey("ns/none"), reason="GangRejected", message="", now_s=1) == []


def test_memory_stays_flat_when_finished_workloads_are_forgotten() -> None:
    engine = _engine()
    for i in range(10_000):
        key = WorkloadKey(f"ns/w{i}")
        engine.submit(_wl(f"w{i}"), now_s=i)
        assert _kinds(engine.schedule(now_s=i))[-1] == (EventType.ADMITTED, key)
        engine.finish(key, now_s=i)
        engine.forget(key)
        assert len(engine.records) <= 1
    assert engine.records == {}
    assert engine.cluster_queue_status("cq").admitted_workloads == 0


@pytest.mark.parametrize("end", ["finish", "delete", "inactive"])
def test_forget_drops_a_workload_that_is_done(end: str) -> None:
    engine = _engine()
    engine.submit(_wl("a", active=end != "inactive"), now_s=0)
    engine.schedule(now_s=0)
    if end == "finish":
        engine.finish(A, now_s=1)
    elif end == "delete":
        engine.delete(A, now_s=1)
    engine.forget(A)
    assert engine.phase(A) is None
    assert engine.workloads() == []
    # The key is free again: a later submission is a new workload.
    engine.submit(_wl("a"), now_s=2)
    assert _kinds(engine.schedule(now_s=2))[-1] == (EventType.ADMITTED, "ns/a")


def test_forget_is_a_no_op_for_a_pending_or_admitted_workload() -> None:
    engine = _engine()
    engine.submit(_wl("a", cpu=3), now_s=0)
    engine.submit(_wl("b", cpu=3), now_s=0)
    engine.schedule(now_s=0)
    for key in (A, WorkloadKey("ns/b"), WorkloadKey("ns/unknown")):
        engine.forget(key)
    assert engine.phase(A) == "Admitted"
    assert engine.phase(WorkloadKey("ns/b")) == "Pending"
    assert _kinds(engine.finish(A, now_s=1)) == [(EventType.FINISHED, "ns/a")]
    assert _kinds(engine.schedule(now_s=1))[-1] == (EventType.ADMITTED, "ns/b")


def test_a_workload_deleted_while_pending_and_forgotten_is_never_admitted() -> None:
    engine = _engine()
    engine.submit(_wl("a", cpu=3), now_s=0)
    engine.submit(_wl("b", cpu=3), now_s=0)
    engine.submit(_wl("c", cpu=3), now_s=0)
    engine.schedule(now_s=0)
    b = WorkloadKey("ns/b")
    engine.delete(b, now_s=1)
    engine.forget(b)
    engine.finish(A, now_s=2)
    assert _kinds(engine.schedule(now_s=2))[-1] == (EventType.ADMITTED, "ns/c")
    assert [p.key for p in engine.pending_workloads("cq")] == []


def test_phase_and_tree_of_cluster_queue_read_what_the_engine_knows() -> None:
    engine = _engine()
    engine.apply(_cq("left", cohort="shared"), now_s=0)
    engine.apply(Cohort(meta=ObjectMeta(name="shared")), now_s=0)
    assert engine.tree_of_cluster_queue("cq") == "cq/cq"
    assert engine.tree_of_cluster_queue("left") == "cohort/shared"
    assert engine.tree_of_cluster_queue("gone") is None
    assert engine.phase(A) is None
    engine.submit(_wl("a"), now_s=0)
    assert engine.phase(A) == "Pending"
    engine.schedule(now_s=0)
    assert engine.phase(A) == "Admitted"
    engine.finish(A, now_s=1)
    assert engine.phase(A) == "Finished"


def test_workloads_arriving_before_a_round_list_their_group_and_queue_once() -> None:
    engine = _engine()
    for n in range(50):  # as a rebuilt replica adopts them: every arrival before one round
        engine.submit(_wl(f"w{n}"), now_s=0)

    queue = engine.state.queues["cq"]
    assert (len(queue.active), len(queue.tree.ready)) == (1, 1)  # not one entry per arrival
    admitted = [e.object for e in engine.schedule(now_s=0) if e.type is EventType.ADMITTED]
    assert admitted == ["ns/w0", "ns/w1", "ns/w2", "ns/w3"]


def test_a_head_that_left_its_group_and_came_back_is_listed_again() -> None:
    engine = _engine(hold=True)
    engine.submit(_wl("a", cpu=4), now_s=0)
    assert _kinds(engine.schedule(now_s=0))[-1] == (EventType.ADMITTED, "ns/a")
    engine.evict(A, reason="GangRejected", message="2 of 3 placed", now_s=1)
    engine.stopped(A, now_s=2)  # back in its group, in its old place: the key it was listed by

    assert _kinds(engine.schedule(now_s=3))[-1] == (EventType.ADMITTED, "ns/a")
