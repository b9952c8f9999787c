"""Quota held for a preemptor while its victims stop (issue 20 item 4), as the services run the
engine: an evicted workload keeps its quota until `stopped()` reports its pods gone."""

from __future__ import annotations

from muster.api import decode_yaml
from muster.api.model import ApiObject, Workload, WorkloadKey
from muster.core.engine import Engine
from muster.core.events import Event, EventType

CLUSTER = """\
apiVersion: v1
kind: Namespace
metadata: {name: ns}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: main}
spec:
  namespaceSelector: {}
  queueingStrategy: STRATEGY
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 6}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: ns, name: lq}
spec: {clusterQueue: main}
"""


def _objects(text: str) -> list[ApiObject]:
    objects, errors = decode_yaml(text)
    assert not errors, errors
    return list(objects)


def _workload(name: str, *, cpu: int, priority: int) -> Workload:
    (wl,) = _objects(f"""\
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: ns, name: {name}}}
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


def _running_lows_and_a_preemptor(
    strategy: str = "BestEffortFIFO",
) -> tuple[Engine, list[Event]]:
    """main (6 cpu) runs low1..low3 (2 cpu, priority 0); `waiting` (2 cpu, priority 0) cannot
    preempt them; `urgent` (4 cpu, priority 10) arrives at 1 s and preempts two lows."""
    cluster = CLUSTER.replace("STRATEGY", strategy)
    engine = Engine(_objects(cluster), hold_quota_until_stopped=True)
    for name in ("low1", "low2", "low3", "waiting"):
        engine.submit(_workload(name, cpu=2, priority=0), now_s=0)
    engine.schedule(now_s=0)
    engine.submit(_workload("urgent", cpu=4, priority=10), now_s=1)
    return engine, engine.schedule(now_s=1)


def _keys(events: list[Event], type_: EventType) -> list[str]:
    return [e.object for e in events if e.type is type_]


def test_quota_freed_for_a_preemptor_is_not_given_to_lower_priority_work() -> None:
    engine, events = _running_lows_and_a_preemptor()
    victims = _keys(events, EventType.PREEMPTED)
    assert victims == ["ns/low3", "ns/low2"]  # most recently admitted first
    (waiting,) = [e for e in events if e.type is EventType.PENDING and e.object == "ns/urgent"]
    assert waiting.reason == "WaitingForPreemptedWorkloads"
    assert waiting.message.endswith(". Pending the preemption of 2 workload(s)")

    # The first victim stops: 2 cpu are free, but they are urgent's, not `waiting`'s.
    engine.stopped(WorkloadKey(victims[0]), now_s=2)
    after_first = engine.schedule(now_s=2)
    assert _keys(after_first, EventType.QUOTA_RESERVED) == []
    # urgent picks the victim still stopping again: it evicts no one more.
    assert _keys(after_first, EventType.PREEMPTED) == []

    engine.stopped(WorkloadKey(victims[1]), now_s=3)
    after_second = engine.schedule(now_s=3)
    assert _keys(after_second, EventType.QUOTA_RESERVED) == ["ns/urgent"]
    assert engine.phase(WorkloadKey("ns/waiting")) == "Pending"
    assert engine.phase(WorkloadKey("ns/low1")) == "Admitted"


def test_in_a_best_effort_queue_nothing_passes_a_waiting_preemptor() -> None:
    # Kueue keeps the preemptor at the head of a BestEffortFIFO queue: even higher priority
    # work of that queue waits behind it.
    engine, events = _running_lows_and_a_preemptor()
    victims = _keys(events, EventType.PREEMPTED)
    engine.submit(_workload("vip", cpu=2, priority=20), now_s=2)
    engine.stopped(WorkloadKey(victims[0]), now_s=2)
    assert _keys(engine.schedule(now_s=2), EventType.QUOTA_RESERVED) == []
    engine.stopped(WorkloadKey(victims[1]), now_s=3)
    assert _keys(engine.schedule(now_s=3), EventType.QUOTA_RESERVED) == ["ns/urgent"]


def test_in_a_strict_queue_higher_priority_work_may_take_what_a_preemptor_waits_for() -> None:
    # StrictFIFO orders by priority: a workload ahead of urgent goes first.
    engine, events = _running_lows_and_a_preemptor("StrictFIFO")
    victims = _keys(events, EventType.PREEMPTED)
    engine.submit(_workload("vip", cpu=2, priority=20), now_s=2)
    engine.stopped(WorkloadKey(victims[0]), now_s=2)
    assert _keys(engine.schedule(now_s=2), EventType.QUOTA_RESERVED) == ["ns/vip"]


def test_a_preemptor_stopped_while_its_victims_stop_gives_up_what_it_was_waiting_for() -> None:
    # kueuectl stop workload on urgent: the quota its victims free goes to the queue again.
    engine, events = _running_lows_and_a_preemptor()
    victims = _keys(events, EventType.PREEMPTED)
    assert engine.set_active(WorkloadKey("ns/urgent"), False, now_s=2) == []
    assert engine.phase(WorkloadKey("ns/urgent")) == "Inactive"
    engine.stopped(WorkloadKey(victims[0]), now_s=2)
    # The victim, requeued by its creation time, is first in the queue again.
    assert _keys(engine.schedule(now_s=2), EventType.QUOTA_RESERVED) == [victims[0]]
    assert engine.phase(WorkloadKey("ns/urgent")) == "Inactive"
