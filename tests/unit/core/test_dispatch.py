"""Dispatch to worker clusters (`muster.core.dispatch`): which cluster a MultiKueue workload goes
to under first-fit and best-fit, what a cluster's nodes can take, and why none can."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from muster.api import decode_yaml
from muster.api.model import (
    Admission,
    AdmissionCheck,
    DispatchStrategy,
    MultiKueueConfig,
    PodSetAssignment,
    ResourceFlavor,
    Taint,
    Workload,
)
from muster.core.dispatch import (
    Candidate,
    ClusterCapacity,
    Demand,
    Dispatched,
    NoClusterFits,
    NodeRoom,
    PodSetDemand,
    Route,
    demand_of,
    dispatch,
    fit,
    free_share_after,
    is_multikueue,
    minus,
    node_room,
    route_of,
)
from muster.core.placement.model import NodeInfo, NodeName

CPU = 1000  # milli-units of one cpu
POD = 1000
both_strategies = pytest.mark.parametrize("strategy", ["first-fit", "best-fit"])


def workload(*, cpu: str = "1", count: int = 1, extra: str = "") -> Workload:
    text = f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{name: train, namespace: ml}}
spec:
  queueName: main
  podSets:
  - name: main
    count: {count}
    template:
      spec:
        {extra}
        containers: [{{name: c, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"""
    (wl,), errors = decode_yaml(text)
    assert errors == []
    assert isinstance(wl, Workload)
    return wl


def admission(count: int, *, flavor: str = "default") -> Admission:
    return Admission(
        cluster_queue="cq",
        pod_set_assignments=(
            PodSetAssignment(name="main", flavors={"cpu": flavor}, count=count, resource_usage={}),
        ),
    )


def demand(*, cpu: str = "1", count: int = 1, extra: str = "") -> Demand:
    return demand_of(workload(cpu=cpu, count=count, extra=extra), admission(count), flavors={})


def node(
    name: str,
    *,
    cpu: float = 4,
    free_cpu: float | None = None,
    labels: Mapping[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    pods: int = 110,
) -> NodeRoom:
    allocatable = {"cpu": int(cpu * CPU), "pods": pods * POD}
    free = dict(allocatable)
    if free_cpu is not None:
        free["cpu"] = int(free_cpu * CPU)
    return NodeRoom(
        name=name, labels=labels or {}, taints=taints, allocatable=allocatable, free=free
    )


def cluster(name: str, *nodes: NodeRoom, unavailable: str = "") -> Candidate:
    return Candidate(
        cluster=name,
        capacity=ClusterCapacity(cluster=name, nodes=tuple(nodes)),
        unavailable=unavailable,
    )


def chosen(outcome: Dispatched | NoClusterFits) -> str:
    assert isinstance(outcome, Dispatched), outcome
    return outcome.cluster


# --- first-fit and best-fit -----------------------------------------------------------------


def test_first_fit_takes_the_first_listed_cluster_with_room_for_the_whole_workload() -> None:
    candidates = [cluster("a", node("a1", cpu=2)), cluster("b", node("b1", cpu=8))]
    assert chosen(dispatch(demand(count=2), candidates, strategy="first-fit")) == "a"
    # One pod more than a holds: the whole workload goes to b, none of it to a.
    outcome = dispatch(demand(count=3), candidates, strategy="first-fit")
    assert chosen(outcome) == "b"
    assert isinstance(outcome, Dispatched)
    assert outcome.takes == {"b1": {"cpu": 3 * CPU, "pods": 3 * POD}}
    assert outcome.message == (
        "dispatched to cluster b: the first listed with room; not a: 2 of 3 pods fit"
    )


def test_best_fit_takes_the_cluster_left_with_the_most_of_the_dominant_resource() -> None:
    candidates = [
        cluster("a", node("a1", cpu=4)),  # 2 of 4 cpu left: 50%
        cluster("b", node("b1", cpu=8, free_cpu=3)),  # 1 of 8 left: 12%
        cluster("c", node("c1", cpu=10)),  # 8 of 10 left: 80%
    ]
    outcome = dispatch(demand(count=2), candidates, strategy="best-fit")
    assert chosen(outcome) == "c"
    assert isinstance(outcome, Dispatched)
    assert outcome.message == (
        "dispatched to cluster c: the most room left (80% of its dominant resource free)"
    )
    assert chosen(dispatch(demand(count=2), candidates, strategy="first-fit")) == "a"


def test_best_fit_ties_go_to_the_cluster_listed_first() -> None:
    candidates = [cluster("b", node("b1", cpu=4)), cluster("a", node("a1", cpu=4))]
    assert chosen(dispatch(demand(), candidates, strategy="best-fit")) == "b"


def test_dominant_resource_is_the_one_needed_most_relative_to_the_cluster() -> None:
    gpu_node = NodeRoom(
        name="g",
        allocatable={"cpu": 64 * CPU, "nvidia.com/gpu": 8000, "pods": 110 * POD},
        free={"cpu": 64 * CPU, "nvidia.com/gpu": 8000, "pods": 110 * POD},
    )
    wl = demand_of(
        workload(extra="", cpu="8"), admission(1), flavors={}
    )  # 8 of 64 cpu: 12.5% of the cluster
    with_gpu = Demand(
        pod_sets=(
            PodSetDemand(
                name="main",
                count=1,
                requests={**wl.pod_sets[0].requests, "nvidia.com/gpu": 4000},
            ),
        )
    )  # 4 of 8 gpus: 50%, the dominant share
    capacity = ClusterCapacity(cluster="g", nodes=(gpu_node,))
    assert free_share_after(with_gpu, capacity) == pytest.approx(0.5)
    assert free_share_after(wl, capacity) == pytest.approx(56 / 64)


@both_strategies
def test_lost_and_full_clusters_are_skipped_with_their_reasons(strategy: DispatchStrategy) -> None:
    candidates = [
        cluster("a", node("a1", cpu=8), unavailable="lost"),
        cluster("b", node("b1", cpu=1)),
        cluster("c", node("c1", cpu=4)),
    ]
    assert chosen(dispatch(demand(count=3), candidates, strategy=strategy)) == "c"
    outcome = dispatch(demand(count=5), candidates, strategy=strategy)
    assert outcome == NoClusterFits(
        message="no worker cluster can run it now: a: lost; b: 1 of 5 pods fit; c: 4 of 5 pods fit"
    )


@both_strategies
def test_a_cluster_of_unknown_capacity_is_taken_as_having_room(strategy: DispatchStrategy) -> None:
    candidates = [Candidate(cluster="a", unavailable="lost"), Candidate(cluster="b")]
    outcome = dispatch(demand(count=100), candidates, strategy=strategy)
    assert chosen(outcome) == "b"
    assert isinstance(outcome, Dispatched)
    assert outcome.takes == {}


def test_no_candidates_and_no_nodes_say_so() -> None:
    assert dispatch(demand(), [], strategy="first-fit") == NoClusterFits(
        message="no worker cluster can run it now: no clusters listed"
    )
    assert dispatch(demand(), [cluster("a")], strategy="first-fit") == NoClusterFits(
        message="no worker cluster can run it now: a: no schedulable nodes"
    )


# --- what a cluster's nodes take ------------------------------------------------------------


def test_fit_spreads_a_podset_over_nodes_in_order_and_counts_pod_slots() -> None:
    nodes = [node("n1", cpu=3), node("n2", cpu=8, pods=2), node("n3", cpu=8)]
    found = fit(demand(count=7), nodes)
    assert found.complete
    assert found.takes == {
        "n1": {"cpu": 3 * CPU, "pods": 3 * POD},
        "n2": {"cpu": 2 * CPU, "pods": 2 * POD},  # out of pod slots before cpu
        "n3": {"cpu": 2 * CPU, "pods": 2 * POD},
    }


def test_fit_just_fits_and_one_more_pod_does_not() -> None:
    nodes = [node("n1", cpu=2), node("n2", cpu=2)]
    assert fit(demand(count=4), nodes).complete
    over = fit(demand(count=5), nodes)
    assert (over.placed, over.wanted, over.complete) == (4, 5, False)


def test_fractional_requests_do_not_fit_where_the_remainder_is_too_small() -> None:
    nodes = [node("n1", cpu=1, free_cpu=0.4)]
    assert fit(demand(cpu="500m"), nodes).placed == 0
    assert fit(demand(cpu="400m"), nodes).placed == 1


def test_a_resource_the_nodes_do_not_have_fits_nowhere() -> None:
    wl = demand()
    gpu = Demand(
        pod_sets=(
            PodSetDemand(
                name="main", count=1, requests={**wl.pod_sets[0].requests, "nvidia.com/gpu": 1000}
            ),
        )
    )
    assert fit(gpu, [node("n1")]).placed == 0


def test_flavor_node_labels_and_tolerations_choose_the_nodes() -> None:
    (spot,), errors = decode_yaml(
        """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: spot}
spec:
  nodeLabels: {pool: spot}
  tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]
"""
    )
    assert errors == []
    assert isinstance(spot, ResourceFlavor)
    flavors = {"spot": spot}
    wanted = demand_of(workload(count=2), admission(2, flavor="spot"), flavors=flavors)
    tainted = (Taint(key="spot", effect="NoSchedule"),)
    plain = node("plain", cpu=8)
    spot_node = node("spot-1", cpu=8, labels={"pool": "spot"}, taints=tainted)
    assert fit(wanted, [plain, spot_node]).takes.keys() == {"spot-1"}
    untolerated = demand(count=2)
    assert fit(untolerated, [spot_node]).placed == 0  # the taint keeps it off


def test_required_node_affinity_limits_the_nodes() -> None:
    affinity = (
        "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
        "{nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [b]}]}]}}}"
    )
    wanted = demand(extra=affinity)
    nodes = [node("a1", labels={"zone": "a"}), node("b1", labels={"zone": "b"})]
    assert fit(wanted, nodes).takes.keys() == {"b1"}


def test_holds_of_workloads_dispatched_but_not_placed_take_room() -> None:
    capacity = ClusterCapacity(cluster="a", nodes=(node("a1", cpu=4),))
    first = dispatch(
        demand(count=3), [Candidate(cluster="a", capacity=capacity)], strategy="first-fit"
    )
    assert isinstance(first, Dispatched)
    held = minus(capacity, [first.takes])
    assert held.nodes[0].free["cpu"] == 1 * CPU
    candidates = [Candidate(cluster="a", capacity=held), cluster("b", node("b1", cpu=4))]
    assert chosen(dispatch(demand(count=3), candidates, strategy="first-fit")) == "b"
    assert minus(capacity, []) is capacity


def test_cordoned_and_not_ready_nodes_take_no_pods() -> None:
    info = NodeInfo(name=NodeName("n"), allocatable={"cpu": CPU, "pods": POD})
    assert node_room(info, {"cpu": CPU, "pods": POD}) == NodeRoom(
        name="n", allocatable=info.allocatable, free={"cpu": CPU, "pods": POD}
    )
    cordoned = NodeInfo(name=NodeName("n"), unschedulable=True)
    assert node_room(cordoned, {}) is None
    assert node_room(NodeInfo(name=NodeName("n"), ready=False), {}) is None


# --- routes --------------------------------------------------------------------------------


def objects(text: str) -> Sequence[object]:
    found, errors = decode_yaml(text)
    assert errors == []
    return found


MULTIKUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: dispatch}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: workers}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata:
  name: workers
  annotations: {muster.dev/dispatch: best-fit}
spec: {clusters: [east, west]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: prov}
spec: {controllerName: kueue.x-k8s.io/provisioning-request}
"""


def test_a_multikueue_check_routes_to_its_configs_clusters() -> None:
    check, config, other = objects(MULTIKUEUE)
    assert isinstance(check, AdmissionCheck)
    assert isinstance(other, AdmissionCheck)
    assert isinstance(config, MultiKueueConfig)
    assert is_multikueue(check)
    assert not is_multikueue(other)
    assert not is_multikueue(None)
    assert route_of(check, {"workers": config}) == Route(
        check="dispatch", clusters=("east", "west"), strategy="best-fit"
    )
    assert route_of(check, {}) == NoClusterFits(
        message="AdmissionCheck dispatch: MultiKueueConfig workers not found"
    )
