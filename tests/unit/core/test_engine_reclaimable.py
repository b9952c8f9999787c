"""status.reclaimablePods through the engine: pods that finished for good give quota back."""

from __future__ import annotations

from muster.api.decode import decode_yaml
from muster.api.model import KueueConfig, ReclaimablePod, Workload, WorkloadKey
from muster.core.engine import Engine
from muster.core.events import Event, EventType

RUNNING, WAITING = WorkloadKey("ns/running"), WorkloadKey("ns/waiting")

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [pods, cpu]
    flavors:
    - {name: default, resources: [{name: pods, nominalQuota: 5}, {name: cpu, nominalQuota: 10}]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: ns, name: lq}
spec: {clusterQueue: cq}
"""

ADMITTED_4 = """
status:
  admission:
    clusterQueue: cq
    podSetAssignments:
    - name: main
      count: 4
      flavors: {cpu: default, pods: default}
      resourceUsage: {cpu: 4, pods: 4}
  conditions:
  - {type: QuotaReserved, status: "True", reason: QuotaReserved, message: reserved}
  - {type: Admitted, status: "True", reason: Admitted, message: admitted}
"""


def _workload(name: str, count: int, status: str = "") -> Workload:
    pod = "{spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}"
    objects, errors = decode_yaml(f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: ns, name: {name}}}
spec:
  queueName: lq
  podSets:
  - {{name: main, count: {count}, template: {pod}}}
{status}""")
    assert errors == []
    (wl,) = objects
    assert isinstance(wl, Workload)
    return wl


def _engine(*, gate: bool = True) -> Engine:
    objects, errors = decode_yaml(QUEUES)
    assert errors == []
    return Engine(objects, config=KueueConfig(reclaimable_pods=gate))


def _admitted(events: list[Event]) -> list[str]:
    return [e.object for e in events if e.type is EventType.ADMITTED]


def _reserved_pods(engine: Engine) -> int:
    (flavor,) = engine.cluster_queue_status("cq").flavors_reservation
    return next(r.total for r in flavor.resources if r.name == "pods") // 1000


def test_a_running_workloads_reclaimable_pods_free_quota_for_what_waits() -> None:
    engine = _engine()
    engine.submit(_workload("running", 4, ADMITTED_4), now_s=0)
    engine.submit(_workload("waiting", 3), now_s=0)
    assert _admitted(engine.schedule(now_s=0)) == []  # 4 + 3 pods > 5

    assert engine.set_reclaimable(RUNNING, [ReclaimablePod(name="main", count=2)], now_s=1) == []
    assert _reserved_pods(engine) == 2
    assert _admitted(engine.schedule(now_s=1)) == ["ns/waiting"]
    assert _reserved_pods(engine) == 5
    assert engine.workload(RUNNING).reclaimable_pods == (ReclaimablePod(name="main", count=2),)


def test_fewer_reclaimable_pods_take_quota_back() -> None:
    engine = _engine()
    reclaiming = ADMITTED_4 + "  reclaimablePods: [{name: main, count: 3}]\n"
    engine.submit(_workload("running", 4, reclaiming), now_s=0)
    assert _reserved_pods(engine) == 1
    engine.set_reclaimable(RUNNING, [ReclaimablePod(name="main", count=1)], now_s=1)
    assert _reserved_pods(engine) == 3
    engine.set_reclaimable(RUNNING, [], now_s=2)
    assert _reserved_pods(engine) == 4
    engine.finish(RUNNING, now_s=3)
    assert _reserved_pods(engine) == 0  # gives back exactly what it held


def test_a_pending_workload_is_asked_only_for_the_pods_it_still_needs() -> None:
    engine = _engine()
    engine.submit(_workload("waiting", 6), now_s=0)
    assert _admitted(engine.schedule(now_s=0)) == []  # 6 pods > 5, ever

    engine.set_reclaimable(WAITING, [ReclaimablePod(name="main", count=2)], now_s=1)
    assert _admitted(engine.schedule(now_s=1)) == ["ns/waiting"]
    admission = engine.admission(WAITING)
    assert admission is not None
    (assigned,) = admission.pod_set_assignments
    assert (assigned.count, assigned.resource_usage) == (4, {"cpu": 4000, "pods": 4000})


def test_with_the_gate_off_reclaimable_pods_are_kept_but_free_nothing() -> None:
    engine = _engine(gate=False)
    engine.submit(_workload("running", 4, ADMITTED_4), now_s=0)
    engine.submit(_workload("waiting", 3), now_s=0)
    engine.set_reclaimable(RUNNING, [ReclaimablePod(name="main", count=2)], now_s=1)
    assert _admitted(engine.schedule(now_s=1)) == []
    assert _reserved_pods(engine) == 4
    assert engine.workload(RUNNING).reclaimable_pods == (ReclaimablePod(name="main", count=2),)
