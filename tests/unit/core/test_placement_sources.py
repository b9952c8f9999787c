"""Gang sources to placement inputs: the gang a pod joins, and an admitted workload's gang."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import TypeVar

import msgspec
import pytest

from muster.api import decode_yaml
from muster.api.model import (
    ApiObject,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    ResourceFlavor,
    SchedulingWorkload,
    Toleration,
    Workload,
)
from muster.core.placement.model import GangKey, GangSpec, NodeInfo, NodeName, TopologyRequest
from muster.core.placement.sources import (
    AdmittedGang,
    Membership,
    gang_of_admitted,
    handled_by,
    membership,
    node_info,
    pod_info,
    pods_to_create,
    priority_of,
)

T = TypeVar("T")
GI = 2**30 * 1000
CREATED = "2025-01-02T03:04:05Z"
CREATED_S = 1735787045.0

WORKLOAD_API = f"""
apiVersion: scheduling.k8s.io/v1alpha1
kind: Workload
metadata: {{name: train, namespace: ml, creationTimestamp: {CREATED}}}
spec:
  podGroups:
  - {{name: workers, policy: {{gang: {{minCount: 2}}}}}}
  - {{name: driver, policy: {{basic: {{}}}}}}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {{name: group, namespace: ml, creationTimestamp: {CREATED}}}
spec: {{minMember: 3, scheduleTimeoutSeconds: 30}}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {{name: untimed, namespace: ml}}
spec: {{minMember: 2}}
"""


def objects(text: str) -> list[ApiObject]:
    found, errors = decode_yaml(textwrap.dedent(text))
    assert [str(e) for e in errors] == []
    return found


def one(text: str, kind: type[T]) -> T:
    (obj,) = objects(text)
    assert isinstance(obj, kind)
    return obj


def keyed(found: list[ApiObject], kind: type[T]) -> dict[str, T]:
    return {
        f"{o.meta.namespace}/{o.meta.name}": o  # type: ignore[union-attr]  # every kind has meta
        for o in found
        if isinstance(o, kind)
    }


def pod(
    *,
    ref: str = "",
    labels: Mapping[str, str] | None = None,
    scheduler: str = "muster",
    extra: str = "",
) -> Pod:
    spec = [f"schedulerName: {scheduler}"]
    if ref:
        spec.append(f"workloadRef: {ref}")
    if extra:
        spec.append(extra)
    meta = {"name": "p", "namespace": "ml", "labels": dict(labels or {})}
    text = f"apiVersion: v1\nkind: Pod\nmetadata: {meta}\nspec:\n" + "".join(
        f"  {line}\n" for line in spec
    )
    return one(text, Pod)


def member_of(
    p: Pod,
    *,
    default_timeout_s: float | None = None,
    admitted: Mapping[str, GangSpec] | None = None,
) -> Membership:
    found = objects(WORKLOAD_API)
    return membership(
        p,
        workloads=keyed(found, SchedulingWorkload),
        pod_groups=keyed(found, PodGroup),
        admitted=admitted or {},
        priority=7,
        default_timeout_s=default_timeout_s,
    )


# --- which pods muster handles, nodes, pods ---------------------------------------------------


@pytest.mark.parametrize(
    ("scheduler", "ours", "handled"),
    [("muster", "muster", True), ("default-scheduler", "muster", False), ("batch", "batch", True)],
    ids=["muster", "default-scheduler", "configured-name"],
)
def test_handles_only_pods_naming_its_scheduler(scheduler: str, ours: str, handled: bool) -> None:
    assert handled_by(pod(scheduler=scheduler), ours) is handled


def test_pods_naming_no_scheduler_are_left_to_the_default_one() -> None:
    assert not handled_by(one("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", Pod))


def test_node_info_defaults_the_pod_count_to_110() -> None:
    n = one(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {rack: r1}}\n"
        "spec: {unschedulable: true}\n"
        "status: {capacity: {cpu: 4, memory: 32Gi},"
        " conditions: [{type: Ready, status: 'False'}]}\n",
        Node,
    )
    assert node_info(n) == NodeInfo(
        name=NodeName("n1"),
        labels={"rack": "r1"},
        allocatable={"cpu": 4000, "memory": 32 * GI, "pods": 110_000},
        unschedulable=True,
        ready=False,
    )


def test_node_info_keeps_a_listed_pod_count() -> None:
    n = one(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {capacity: {pods: 8}}\n", Node
    )
    assert node_info(n).allocatable == {"pods": 8000}


def test_pod_info_is_bound_to_its_node_and_drops_a_pods_request() -> None:
    p = one(
        "apiVersion: v1\nkind: Pod\n"
        f"metadata: {{name: p, namespace: ml, creationTimestamp: {CREATED}}}\n"
        "spec:\n  nodeName: n1\n  nodeSelector: {pool: a}\n"
        "  containers: [{name: c, resources: {requests: {cpu: 100m, pods: 1}}}]\n",
        Pod,
    )
    info = pod_info(p, gang=GangKey("ml/g"), workload="ml/w", priority=3)
    assert (info.key, info.node, info.gang, info.workload) == ("ml/p", "n1", "ml/g", "ml/w")
    assert (info.requests, info.node_selector) == ({"cpu": 100}, {"pool": "a"})
    assert (info.priority, info.created_s) == (3, CREATED_S)
    assert pod_info(p, gang=None, created_s=5.0).created_s == 5.0
    assert pod_info(pod(), gang=None).node == ""


PRIORITY_CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: normal}
value: 10
globalDefault: true
"""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("priority: 5", 5),
        ("priorityClassName: high", 1000),
        ("", 10),
        ("priorityClassName: missing", 0),
    ],
    ids=["spec-priority", "class", "global-default", "unknown-class"],
)
def test_pod_priority_comes_from_spec_then_its_class_then_the_default(
    extra: str, expected: int
) -> None:
    classes = {o.meta.name: o for o in objects(PRIORITY_CLASSES) if isinstance(o, PriorityClass)}
    assert priority_of(pod(extra=extra), classes) == expected
    assert priority_of(pod(), {}) == 0


# --- membership ------------------------------------------------------------------------------


def test_workload_ref_joins_the_gang_of_its_pod_group_and_replica_key() -> None:
    joined = member_of(pod(ref="{name: train, podGroup: workers, podGroupReplicaKey: '0'}"))
    assert joined == Membership(
        gang=GangKey("ml/train/workers/0"),
        spec=GangSpec(
            key=GangKey("ml/train/workers/0"),
            min_count=2,
            priority=7,
            created_s=CREATED_S,
            workload="ml/train",
        ),
        workload="ml/train",
    )


def test_replica_keys_split_independent_gangs_with_the_same_policy() -> None:
    zero = member_of(pod(ref="{name: train, podGroup: workers, podGroupReplicaKey: '0'}"))
    one_ = member_of(pod(ref="{name: train, podGroup: workers, podGroupReplicaKey: '1'}"))
    none = member_of(pod(ref="{name: train, podGroup: workers}"))
    assert [m.gang for m in (zero, one_, none)] == [
        "ml/train/workers/0",
        "ml/train/workers/1",
        "ml/train/workers",
    ]
    assert {m.spec.min_count for m in (zero, one_, none) if m.spec} == {2}


def test_basic_policy_places_pods_on_their_own() -> None:
    joined = member_of(pod(ref="{name: train, podGroup: driver}"))
    assert joined == Membership(gang=None, spec=None, workload="ml/train")


def test_pods_of_an_unknown_workload_wait_for_it() -> None:
    joined = member_of(pod(ref="{name: later, podGroup: workers}"))
    assert joined == Membership(gang=GangKey("ml/later/workers"), workload="ml/later")


def test_a_pod_group_its_workload_lacks_is_a_problem() -> None:
    joined = member_of(pod(ref="{name: train, podGroup: ps}"))
    assert (joined.gang, joined.spec) == ("ml/train/ps", None)
    assert joined.problem == "Workload ml/train has no pod group 'ps' (it has workers, driver)"


def test_pod_group_label_joins_the_pod_group_with_its_min_member_and_timeout() -> None:
    joined = member_of(pod(labels={"scheduling.x-k8s.io/pod-group": "group"}))
    assert joined.spec == GangSpec(
        key=GangKey("ml/group"),
        min_count=3,
        priority=7,
        created_s=CREATED_S,
        timeout_s=30.0,
        workload="ml/group",
    )
    assert (joined.gang, joined.workload) == ("ml/group", "ml/group")


def test_pod_group_without_timeout_takes_the_default() -> None:
    labels = {"scheduling.x-k8s.io/pod-group": "untimed"}
    assert member_of(pod(labels=labels), default_timeout_s=120.0).spec == GangSpec(
        key=GangKey("ml/untimed"), min_count=2, priority=7, timeout_s=120.0, workload="ml/untimed"
    )
    untimed = member_of(pod(labels=labels)).spec
    assert untimed is not None
    assert untimed.timeout_s is None


def test_pods_of_an_unknown_pod_group_wait_for_it() -> None:
    joined = member_of(pod(labels={"scheduling.x-k8s.io/pod-group": "later"}))
    assert joined == Membership(gang=GangKey("ml/later"), workload="ml/later")


def test_workload_ref_wins_over_the_pod_group_label() -> None:
    both = pod(
        ref="{name: train, podGroup: workers}", labels={"scheduling.x-k8s.io/pod-group": "group"}
    )
    assert member_of(both).gang == "ml/train/workers"


def test_pods_of_a_kueue_workload_join_its_admitted_gang() -> None:
    spec = GangSpec(key=GangKey("ml/job"), min_count=4, workload="ml/job")
    labelled = pod(labels={"muster.dev/workload": "job"})
    assert member_of(labelled, admitted={"ml/job": spec}) == Membership(
        gang=GangKey("ml/job"), spec=spec, workload="ml/job"
    )
    assert member_of(labelled) == Membership(gang=GangKey("ml/job"), workload="ml/job")


def test_pods_with_no_gang_source_are_placed_on_their_own() -> None:
    assert member_of(pod()) == Membership()


# --- Kueue-admitted workloads ----------------------------------------------------------------

ADMITTED = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
spec:
  nodeLabels: {pool: gpu, zone: a}
  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: cpu}
spec: {nodeLabels: {pool: cpu}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: train
  namespace: ml
  annotations: {muster.dev/run-seconds: "60"}
spec:
  podSets:
  - name: driver
    count: 1
    template:
      metadata: {annotations: {kueue.x-k8s.io/podset-preferred-topology: block}}
      spec:
        nodeSelector: {pool: any, disk: ssd}
        containers: [{name: c, resources: {requests: {cpu: "1"}}}]
  - name: workers
    count: 4
    minCount: 2
    template:
      metadata: {annotations: {kueue.x-k8s.io/podset-required-topology: rack}}
      spec:
        containers: [{name: c, resources: {requests: {cpu: "2", nvidia.com/gpu: 1}}}]
status:
  admission:
    clusterQueue: team
    podSetAssignments:
    - {name: driver, flavors: {cpu: cpu}, count: 1}
    - {name: workers, flavors: {cpu: gpu, nvidia.com/gpu: gpu}, count: 3}
"""


def admitted_gang() -> tuple[Workload, AdmittedGang]:
    found = objects(ADMITTED)
    flavors = {o.meta.name: o for o in found if isinstance(o, ResourceFlavor)}
    (wl,) = [o for o in found if isinstance(o, Workload)]
    assert wl.admission is not None
    return wl, gang_of_admitted(wl, wl.admission, flavors=flavors, priority=50, created_s=CREATED_S)


def test_admitted_workload_is_one_gang_of_min_counts_or_admitted_counts() -> None:
    _, gang = admitted_gang()
    assert gang.spec == GangSpec(
        key=GangKey("ml/train"),
        min_count=1 + 2,  # driver: its admitted count; workers: minCount
        priority=50,
        created_s=CREATED_S,
        topology=TopologyRequest(key="rack", required=True),  # required wins over preferred
        workload="ml/train",
    )


def test_admitted_pods_carry_their_flavors_node_labels_and_tolerations() -> None:
    _, gang = admitted_gang()
    pods = {p.meta.name: p for p in gang.pods}
    assert sorted(pods) == [
        "train-driver-0",
        "train-workers-0",
        "train-workers-1",
        "train-workers-2",
    ]
    driver, worker = pods["train-driver-0"], pods["train-workers-2"]
    assert driver.node_selector == {"pool": "cpu", "disk": "ssd"}  # the flavor's label wins
    assert driver.tolerations == ()
    assert worker.node_selector == {"pool": "gpu", "zone": "a"}
    assert worker.tolerations == (Toleration(key="gpu", operator="Exists", effect="NoSchedule"),)
    assert worker.requests == {"cpu": 2000, "nvidia.com/gpu": 1000}
    assert (worker.scheduler_name, worker.priority, worker.key) == (
        "muster",
        50,
        "ml/train-workers-2",
    )
    assert worker.meta.labels == {"muster.dev/workload": "train"}
    assert worker.meta.annotations == {
        "kueue.x-k8s.io/podset-required-topology": "rack",
        "muster.dev/run-seconds": "60",
        "muster.dev/pod-set": "workers",
    }
    assert handled_by(worker)
    assert member_of(worker, admitted={"ml/train": gang.spec}).spec == gang.spec


def test_a_gang_without_its_pods_has_the_same_spec_and_podsets() -> None:
    """Gang-permit and dispatch read the spec and the podsets only: the pods are not made."""
    wl, gang = admitted_gang()
    assert wl.admission is not None
    flavors = {o.meta.name: o for o in objects(ADMITTED) if isinstance(o, ResourceFlavor)}
    bare = gang_of_admitted(
        wl, wl.admission, flavors=flavors, priority=50, created_s=CREATED_S, with_pods=False
    )
    assert (bare.spec, bare.pod_sets, bare.pods) == (gang.spec, gang.pod_sets, ())


def test_pods_to_create_are_the_admitted_pods_without_uid_or_priority() -> None:
    wl, gang = admitted_gang()
    made = pods_to_create(wl, gang.pod_sets)
    expected = tuple(
        msgspec.structs.replace(p, priority=None, meta=msgspec.structs.replace(p.meta, uid=""))
        for p in gang.pods
    )
    assert made == expected


def test_preferred_topology_applies_when_no_podset_requires_one() -> None:
    text = ADMITTED.replace("kueue.x-k8s.io/podset-required-topology: rack", "other: x")
    found = objects(text)
    (wl,) = [o for o in found if isinstance(o, Workload)]
    assert wl.admission is not None
    gang = gang_of_admitted(wl, wl.admission, flavors={}, priority=0, created_s=0.0)
    assert gang.spec.topology == TopologyRequest(key="block", required=False)
    assert gang.pods[0].node_selector == {"pool": "any", "disk": "ssd"}  # no flavors known
