"""A parked group whose workloads all left before quota was released: woken empty, the next
workload of its shape that queues is still considered. Before, the group stayed parked in no
parked heap, and that workload waited for good in a queue with room for it (seen when a
check's Retry held the only waiting workload out: task "retryqueued")."""

from __future__ import annotations

from test_engine_lifecycle import A, _engine, _kinds, _wl

from muster.api.model import WorkloadKey
from muster.core.events import EventType

B = WorkloadKey("ns/b")


def test_a_workload_joining_a_group_woken_empty_is_admitted() -> None:
    engine = _engine()
    engine.submit(_wl("a", cpu=4), now_s=0)
    engine.submit(_wl("b", cpu=2), now_s=0)
    assert (EventType.ADMITTED, "ns/a") in _kinds(engine.schedule(now_s=0))
    assert engine.phase(B) == "Pending"  # parked: no room
    engine.delete(B, now_s=1)  # its group empty, still parked
    engine.finish(A, now_s=2)  # the quota it waited for: the group is woken, empty
    engine.schedule(now_s=2)
    engine.submit(_wl("c", cpu=2), now_s=3)  # the same shape: the same group
    assert (EventType.ADMITTED, "ns/c") in _kinds(engine.schedule(now_s=3))
