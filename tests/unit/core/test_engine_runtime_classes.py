"""RuntimeClasses through the engine: overhead charged, a change recharges what holds no quota,
a missing one holds the workload until it appears."""

from __future__ import annotations

from test_engine_limit_ranges import _admitted, _engine, _one
from workload_manifest import runtime_class_workload

from muster.api.model import RuntimeClass, Workload, WorkloadKey


def _workload(name: str) -> Workload:
    """Two pods of 500m cpu each, naming RuntimeClass kata."""
    wl = _one(runtime_class_workload(name))
    assert isinstance(wl, Workload)
    return wl


def _kata(cpu: str) -> RuntimeClass:
    rc = _one(f"""
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {{name: kata}}
handler: kata
overhead: {{podFixed: {{cpu: {cpu}}}}}
""")
    assert isinstance(rc, RuntimeClass)
    return rc


def test_a_missing_runtime_class_holds_the_workload_until_it_appears() -> None:
    engine = _engine()
    engine.submit(_workload("w"), now_s=0)
    assert _admitted(engine.schedule(now_s=0)) == []
    record = engine.records[WorkloadKey("ns/w")]
    assert record.pending_message == (
        "pod overhead validation failed: spec.podSets[0].template.spec.runtimeClassName: "
        'RuntimeClass "kata" not found'
    )
    engine.apply(_kata("500m"), now_s=1)
    assert _admitted(engine.schedule(now_s=1)) == ["ns/w"]
    assert record.wl.pod_sets[0].requests == {"cpu": 1000}  # 500m + 500m overhead per pod


def test_a_runtime_class_change_recharges_pending_workloads_not_admitted_ones() -> None:
    engine = _engine()
    engine.apply(_kata("0"), now_s=0)
    engine.submit(_workload("early"), now_s=0)
    assert _admitted(engine.schedule(now_s=0)) == ["ns/early"]  # 1 cpu: 2 pods of 500m
    for name in ("a", "b"):
        engine.submit(_workload(name), now_s=1)
    # 1 cpu per pod from now on: `early` keeps its 1 cpu; 3 left fit `a` (2), not `b`.
    engine.apply(_kata("500m"), now_s=2)
    assert _admitted(engine.schedule(now_s=2)) == ["ns/a"]
    assert engine.records[WorkloadKey("ns/early")].wl.pod_sets[0].requests == {"cpu": 500}
    assert engine.records[WorkloadKey("ns/b")].wl.pod_sets[0].requests == {"cpu": 1000}
    # Gone: `b` is held, naming the RuntimeClass, rather than charged without its overhead.
    engine.remove("RuntimeClass", "kata", now_s=3)
    assert _admitted(engine.schedule(now_s=3)) == []
    assert 'RuntimeClass "kata" not found' in engine.records[WorkloadKey("ns/b")].pending_message


def test_a_runtime_class_of_another_cluster_costs_nothing_here() -> None:
    """Each cluster's RuntimeClasses are its own, as its Namespaces and LimitRanges."""
    engine = _engine()
    engine.apply(_kata("500m"), now_s=0, cluster="west")
    engine.submit(_workload("w"), now_s=0)
    assert _admitted(engine.schedule(now_s=0)) == []
    assert "not found" in engine.records[WorkloadKey("ns/w")].pending_message
