"""A StrictFIFO head that needs preemption and has no victim holds quota from the heads after
it (Kueue's reserveCapacityForUnreclaimablePreempt), and only while it is that head: deleted,
deactivated, or its ClusterQueue reclaiming Any, it holds nothing and the work it held back
is admitted at once. The simulator and the services (quota held until pods stop) alike."""

from __future__ import annotations

import pytest

from muster.api import decode_yaml
from muster.api.model import ApiObject, ClusterQueue, Workload, WorkloadKey
from muster.core.engine import Engine
from muster.core.events import Event, EventType

# Cohort "shared": team-a (4 cpu, StrictFIFO, reclaims from lower priorities only) and team-b
# (2 cpu). b1 (priority 5) borrows 2 of team-a's; a1 (4 cpu) has no victim.
CLUSTER = """\
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  cohortName: shared
  queueingStrategy: StrictFIFO
  preemption: {reclaimWithinCohort: RECLAIM}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-b}
spec:
  namespaceSelector: {}
  cohortName: shared
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team-a, name: lq}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team-b, name: lq}
spec: {clusterQueue: team-b}
"""
A1, B2 = WorkloadKey("team-a/a1"), WorkloadKey("team-b/b2")
MODES = pytest.mark.parametrize("services", [False, True], ids=["simulator", "services"])


def _objects(text: str) -> list[ApiObject]:
    objects, errors = decode_yaml(text)
    assert not errors, errors
    return list(objects)


def _workload(ns: str, name: str, *, cpu: int, priority: int) -> Workload:
    (wl,) = _objects(f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: {ns}, name: {name}}}
spec:
  queueName: lq
  priority: {priority}
  podSets:
  - name: main
    count: {cpu}
    template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]}}}}
""")
    assert isinstance(wl, Workload)
    return wl


def _held_back(services: bool, reclaim: str = "LowerPriority") -> tuple[Engine, list[Event]]:
    """b1 runs; a1 arrives at 5 s, b2 (1 cpu, of the 2 still free) at 6 s."""
    engine = Engine(
        _objects(CLUSTER.replace("RECLAIM", reclaim)), hold_quota_until_stopped=services
    )
    engine.submit(_workload("team-b", "b1", cpu=4, priority=5), now_s=0)
    engine.schedule(now_s=0)
    engine.submit(_workload("team-a", "a1", cpu=4, priority=0), now_s=5)
    events = engine.schedule(now_s=5)
    engine.submit(_workload("team-b", "b2", cpu=1, priority=0), now_s=6)
    return engine, events + engine.schedule(now_s=6)


def _admitted(events: list[Event]) -> list[str]:
    return [e.object for e in events if e.type is EventType.ADMITTED]


@MODES
def test_the_head_with_no_victim_keeps_its_nominal_quota_from_later_heads(services: bool) -> None:
    engine, events = _held_back(services)
    assert _admitted(events) == []
    assert not any(e.type is EventType.PREEMPTED for e in events)
    assert (engine.phase(A1), engine.phase(B2)) == ("Pending", "Pending")
    assert engine.records[B2].pending_message == (
        "Workload no longer fits after processing another workload"
    )
    # Nothing changes round after round: a1 is tried first in each of Kueue's cycles.
    assert _admitted(engine.schedule(now_s=7)) == []


@MODES
def test_the_head_deleted_releases_what_it_held(services: bool) -> None:
    engine, _ = _held_back(services)
    events = engine.delete(A1, now_s=8) + engine.schedule(now_s=8)
    assert _admitted(events) == [B2]


@MODES
def test_the_head_deactivated_releases_what_it_held(services: bool) -> None:
    engine, _ = _held_back(services)
    events = engine.set_active(A1, False, now_s=8) + engine.schedule(now_s=8)
    assert _admitted(events) == [B2]


@MODES
def test_the_head_holds_what_its_queue_leaves_unused_as_it_changes(services: bool) -> None:
    """a0 (priority 9, 1 cpu) passes a1 and fits: a1, the head again, holds 3 (team-a's
    nominal 4 less a0's 1) and b2 still waits; so it does once a0 is done (a1 holds 4)."""
    engine, _ = _held_back(services)
    engine.submit(_workload("team-a", "a0", cpu=1, priority=9), now_s=8)
    assert _admitted(engine.schedule(now_s=8)) == ["team-a/a0"]
    assert engine.phase(B2) == "Pending"
    events = engine.finish(WorkloadKey("team-a/a0"), now_s=9) + engine.schedule(now_s=9)
    assert _admitted(events) == []
    assert engine.phase(B2) == "Pending"


@MODES
def test_a_configuration_change_decides_the_hold_again(services: bool) -> None:
    """team-a turns BestEffortFIFO: its head holds for one of Kueue's cycles only, and b2,
    held back in it, is admitted in the next (one round in muster)."""
    engine, _ = _held_back(services)
    best_effort = CLUSTER.replace("RECLAIM", "LowerPriority").replace(
        "StrictFIFO", "BestEffortFIFO"
    )
    (cq,) = [
        o for o in _objects(best_effort) if isinstance(o, ClusterQueue) and o.meta.name == "team-a"
    ]
    events = engine.apply(cq, now_s=8) + engine.schedule(now_s=8)
    assert _admitted(events) == [B2]


@MODES
def test_a_queue_reclaiming_any_holds_nothing(services: bool) -> None:
    """a0 (priority 10) runs in team-a: a1 could evict b1 only by borrowing (borrowWithinCohort
    Never), so it has no victim even reclaiming Any, and holds nothing."""
    engine = Engine(_objects(CLUSTER.replace("RECLAIM", "Any")), hold_quota_until_stopped=services)
    engine.submit(_workload("team-a", "a0", cpu=1, priority=10), now_s=0)
    engine.submit(_workload("team-b", "b1", cpu=4, priority=5), now_s=0)
    engine.schedule(now_s=0)
    engine.submit(_workload("team-a", "a1", cpu=4, priority=0), now_s=5)
    engine.submit(_workload("team-b", "b2", cpu=1, priority=0), now_s=5)
    events = engine.schedule(now_s=5)
    assert _admitted(events) == [B2]
    assert not any(e.type is EventType.PREEMPTED for e in events)
