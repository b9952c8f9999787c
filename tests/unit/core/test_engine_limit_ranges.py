"""LimitRanges through the engine: defaults charged, a change recharges what holds no quota."""

from __future__ import annotations

from muster.api.decode import decode_yaml
from muster.api.model import LimitRange, Workload, WorkloadKey
from muster.core.engine import Engine
from muster.core.events import Event, EventType
from muster.core.limit_ranges import Summary, resource_problem, summarize

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
  - coveredResources: [cpu]
    flavors:
    - {name: default, resources: [{name: cpu, nominalQuota: 4}]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: ns, name: lq}
spec: {clusterQueue: cq}
"""


def _one(text: str) -> object:
    objects, errors = decode_yaml(text)
    assert errors == []
    (obj,) = objects
    return obj


def _workload(name: str, container: str = "{name: c}") -> Workload:
    wl = _one(f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: ns, name: {name}}}
spec:
  queueName: lq
  podSets:
  - {{name: main, count: 2, template: {{spec: {{containers: [{container}]}}}}}}
""")
    assert isinstance(wl, Workload)
    return wl


def _limit_range(name: str, limits: str) -> LimitRange:
    lr = _one(f"""
apiVersion: v1
kind: LimitRange
metadata: {{namespace: ns, name: {name}}}
spec: {{limits: {limits}}}
""")
    assert isinstance(lr, LimitRange)
    return lr


def _admitted(events: list[Event]) -> list[str]:
    return [e.object for e in events if e.type is EventType.ADMITTED]


def _engine() -> Engine:
    objects, errors = decode_yaml(QUEUES)
    assert errors == []
    return Engine(objects)


def test_a_new_limit_range_recharges_pending_workloads_not_admitted_ones() -> None:
    engine = _engine()
    engine.submit(_workload("early"), now_s=0)
    assert _admitted(engine.schedule(now_s=0)) == ["ns/early"]  # charged nothing, as written
    for name in ("a", "b", "c"):
        engine.submit(_workload(name), now_s=1)
    # 1 cpu per container from now on: the admitted `early` keeps its 0; 2 of the 3 fit in 4.
    engine.apply(_limit_range("lr", "[{type: Container, defaultRequest: {cpu: 1}}]"), now_s=2)
    assert _admitted(engine.schedule(now_s=2)) == ["ns/a", "ns/b"]
    assert engine.records[WorkloadKey("ns/early")].wl.pod_sets[0].requests == {}
    # Gone again: `c` asks what it wrote (nothing), and fits.
    engine.remove("LimitRange", "lr", namespace="ns", now_s=3)
    assert _admitted(engine.schedule(now_s=3)) == ["ns/c"]


def test_a_tighter_max_makes_a_pending_workload_inadmissible_and_a_looser_one_frees_it() -> None:
    engine = _engine()
    engine.apply(_limit_range("cap", "[{type: Container, max: {cpu: 300m}}]"), now_s=0)
    container = "{name: c, resources: {requests: {cpu: 500m}, limits: {cpu: 500m}}}"
    engine.submit(_workload("w", container), now_s=0)
    assert _admitted(engine.schedule(now_s=0)) == []
    record = engine.records[WorkloadKey("ns/w")]
    assert record.pending_message == (
        "resources didn't satisfy LimitRange constraints: spec.podSets[0].template.spec."
        "containers[0]: cpu 500m is above the max 300m of LimitRange cap"
    )
    engine.apply(_limit_range("cap", "[{type: Container, max: {cpu: 1}}]"), now_s=1)
    assert _admitted(engine.schedule(now_s=1)) == ["ns/w"]


def test_limit_ranges_merge_as_kueue_summarizes_them() -> None:
    """Lowest max, highest min, first default in name order; a Pod entry bounds the total."""
    summary = summarize(
        [
            _limit_range("b", "[{type: Container, max: {cpu: 2}, defaultRequest: {cpu: 300m}}]"),
            _limit_range(
                "a",
                "[{type: Container, max: {cpu: 4}, min: {cpu: 100m}, default: {cpu: 1},"
                " defaultRequest: {cpu: 200m}},"
                " {type: Pod, max: {cpu: 1}}]",
            ),
        ]
    )
    assert summary is not None
    assert summary.container is not None
    assert summary.container.max == {"cpu": 2000}
    assert summary.container.max_from == {"cpu": "b"}
    assert summary.container.default_request == {"cpu": 200}  # a's: first by name
    assert summary.container.default == {"cpu": 1000}
    two = _workload(
        "two", "{name: c, resources: {requests: {cpu: 1500m}, limits: {cpu: 2}}}, {name: d}"
    )
    assert resource_problem(two, summary) == (  # 1500m and d's default 200m
        "resources didn't satisfy LimitRange constraints: spec.podSets[0].template.spec: "
        "pod total cpu 1700m is above the max 1 of LimitRange a"
    )
    # A 50m request is below a's min; a 3-cpu limit is above b's max.
    low = _workload("low", "{name: c, resources: {requests: {cpu: 50m}, limits: {cpu: 3}}}")
    assert resource_problem(low, summary) == (
        "resources didn't satisfy LimitRange constraints: spec.podSets[0].template.spec."
        "containers[0]: cpu 3 is above the max 2 of LimitRange b; spec.podSets[0].template."
        "spec.containers[0]: cpu 50m is below the min 100m of LimitRange a"
    )


def test_a_container_entry_is_defaulted_as_the_api_server_stores_it() -> None:
    """SetDefaults_LimitRangeItem: default <- max, then defaultRequest <- default, else min."""
    lr = _limit_range("d", "[{type: Container, max: {cpu: 2, memory: 1Gi}, min: {memory: 1Mi}}]")
    (item,) = lr.limits
    assert item.default == {"cpu": 2000, "memory": 2**30 * 1000}
    assert item.default_request == {"cpu": 2000, "memory": 2**30 * 1000}
    (pod,) = _limit_range("p", "[{type: Pod, max: {cpu: 2}}]").limits
    assert pod.default == {}
    assert pod.default_request == {}


def test_a_hostile_limit_range_is_refused_naming_the_field() -> None:
    objects, errors = decode_yaml("""
apiVersion: v1
kind: LimitRange
metadata: {namespace: ns, name: bad}
spec:
  limits:
  - type: Container
    max: {cpu: 1e400, memory: 3zz}
    min: {cpu: 2}
    default: {cpu: 1}
  - {type: Pod, default: {cpu: 1}}
  - {type: Node}
  - {type: Pod}
""")
    assert objects == []
    text = "\n".join(str(e) for e in errors)
    assert "spec.limits[0].max.cpu" in text
    assert "spec.limits[0].max.memory" in text
    assert "spec.limits[0].min.cpu: 2 must be at most default 1" in text
    assert "spec.limits[1].default: must not be set for type Pod" in text
    assert "spec.limits[2].type: must be one of Container, Pod, PersistentVolumeClaim" in text
    assert "spec.limits[3].type: Pod is listed twice" in text
    # Another project's type (OpenShift's) is stored by the API server: kept, bounding nothing.
    (lr,) = [_limit_range("os", "[{type: openshift.io/Image, max: {storage: 1Gi}}]")]
    assert summarize([lr]) == Summary()
