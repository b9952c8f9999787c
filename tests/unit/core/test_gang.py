"""place_gang: all pods or none, first-fit-decreasing, filtered by capacity, labels and taints."""

from __future__ import annotations

import itertools

import pytest

from muster.api.model import LabelSelector, LabelSelectorRequirement, Taint, Toleration
from muster.api.quantity import parse_quantity
from muster.core.gang import (
    NodeCapacity,
    NodeName,
    NoFit,
    Placement,
    PodKey,
    PodRequest,
    place_gang,
)


def res(**amounts: str) -> dict[str, int]:
    return {name.replace("_com_", ".com/"): int(parse_quantity(v)) for name, v in amounts.items()}


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str | None = "110",
    used: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    unschedulable: bool = False,
    ready: bool = True,
    **extra: str,
) -> NodeCapacity:
    allocatable = res(cpu=cpu, memory=memory, **extra)
    if pods is not None:
        allocatable["pods"] = int(parse_quantity(pods))
    return NodeCapacity(
        name=NodeName(name),
        labels=labels or {},
        taints=taints,
        allocatable=allocatable,
        used=used or {},
        unschedulable=unschedulable,
        ready=ready,
    )


def gang(
    count: int,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    name: str = "w",
    node_selector: dict[str, str] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    affinity: tuple[LabelSelector, ...] = (),
    **extra: str,
) -> list[PodRequest]:
    return [
        PodRequest(
            key=PodKey(f"ns/{name}-{i}"),
            pod_set="main",
            requests=res(cpu=cpu, memory=memory, **extra),
            node_selector=node_selector or {},
            tolerations=tolerations,
            node_affinity_terms=affinity,
        )
        for i in range(count)
    ]


def nodes_of(result: Placement | NoFit) -> dict[str, str]:
    assert isinstance(result, Placement), result
    return {b.pod: b.node for b in result.bindings}


def test_places_every_pod_when_the_gang_fits() -> None:
    result = place_gang(gang(3, cpu="2"), [node("a"), node("b")])
    assert nodes_of(result) == {"ns/w-0": "a", "ns/w-1": "a", "ns/w-2": "b"}
    assert isinstance(result, Placement)
    assert result.usage[NodeName("a")]["cpu"] == 4000
    assert result.usage[NodeName("a")]["pods"] == 2000


def test_places_nothing_and_says_why_when_three_of_four_fit() -> None:
    result = place_gang(gang(4, cpu="2"), [node("a"), node("b", cpu="2")])
    assert isinstance(result, NoFit)
    assert (result.placed, result.total) == (3, 4)
    assert result.reason == (
        "only 3 of 4 pods fit; pod ns/w-3 (podset main): 0/2 nodes are available: "
        "2 Insufficient cpu"
    )


def test_an_empty_gang_is_placed_trivially() -> None:
    assert place_gang([], [node("a")]) == Placement(bindings=(), usage={})


def test_no_nodes_means_no_fit() -> None:
    result = place_gang(gang(1), [])
    assert isinstance(result, NoFit)
    assert result.reason.endswith("no nodes in the cluster")


def test_bound_pods_and_reservations_take_room() -> None:
    nodes = [node("a", used=res(cpu="3")), node("b")]
    # a has 1 cpu left; b's 4 cpu are reserved for a gang not yet bound but for 1
    result = place_gang(gang(2), nodes, reserved={NodeName("b"): res(cpu="3")})
    assert nodes_of(result) == {"ns/w-0": "a", "ns/w-1": "b"}
    result = place_gang(gang(3), nodes, reserved={NodeName("b"): res(cpu="3")})
    assert isinstance(result, NoFit)
    assert "2 Insufficient cpu" in result.reason


def test_pod_count_limit_is_respected() -> None:
    result = place_gang(gang(3, cpu="100m"), [node("a", pods="2")])
    assert isinstance(result, NoFit)
    assert "1 Too many pods" in result.reason
    assert isinstance(place_gang(gang(3, cpu="100m"), [node("a", pods=None)]), Placement)


def test_a_resource_the_node_lacks_does_not_fit() -> None:
    result = place_gang(gang(1, nvidia_com_gpu="1"), [node("a")])
    assert isinstance(result, NoFit)
    assert "1 Insufficient nvidia.com/gpu" in result.reason


def test_largest_pods_go_first() -> None:
    # first-fit in input order would put the small pod on a and strand the big one
    pods = [*gang(1, cpu="1", name="small"), *gang(1, cpu="4", name="big")]
    result = place_gang(pods, [node("a", cpu="4"), node("b", cpu="1")])
    assert nodes_of(result) == {"ns/big-0": "a", "ns/small-0": "b"}


def test_gpus_count_before_cpu_when_ordering() -> None:
    pods = [*gang(1, cpu="3", name="cpu"), *gang(1, cpu="1", nvidia_com_gpu="1", name="gpu")]
    nodes = [node("a", cpu="3", nvidia_com_gpu="1"), node("b", cpu="3")]
    assert nodes_of(place_gang(pods, nodes)) == {"ns/gpu-0": "a", "ns/cpu-0": "b"}


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (node("a", unschedulable=True), "1 node(s) were unschedulable"),
        (node("a", ready=False), "1 node(s) were not ready"),
        (node("a", labels={"zone": "x"}), "1 node(s) didn't match Pod's node affinity/selector"),
        (
            node("a", labels={"zone": "y"}, taints=(Taint(key="gpu", value="true"),)),
            "1 node(s) had untolerated taint {gpu: true}",
        ),
    ],
    ids=["unschedulable", "not-ready", "selector", "taint"],
)
def test_filters_nodes_pods_may_not_use(bad: NodeCapacity, why: str) -> None:
    pods = gang(1, node_selector={"zone": "y"})
    result = place_gang(pods, [bad])
    assert isinstance(result, NoFit)
    assert result.reason.endswith(f"0/1 nodes are available: {why}")
    good = node("b", labels={"zone": "y"})
    assert nodes_of(place_gang(pods, [bad, good])) == {"ns/w-0": "b"}


def test_tolerated_taints_and_prefer_no_schedule_do_not_filter() -> None:
    taints = (Taint(key="gpu", value="true"), Taint(key="soft", effect="PreferNoSchedule"))
    pods = gang(1, tolerations=(Toleration(key="gpu", operator="Exists"),))
    assert nodes_of(place_gang(pods, [node("a", taints=taints)])) == {"ns/w-0": "a"}


def test_node_affinity_terms_any_may_match() -> None:
    terms = (
        LabelSelector(
            match_expressions=(
                LabelSelectorRequirement(key="zone", operator="In", values=("x", "z")),
            )
        ),
    )
    pods = gang(1, affinity=terms)
    nodes = [node("a", labels={"zone": "y"}), node("b", labels={"zone": "z"})]
    assert nodes_of(place_gang(pods, nodes)) == {"ns/w-0": "b"}


def test_same_result_whatever_the_input_order() -> None:
    pods = [*gang(3, cpu="1500m"), *gang(2, cpu="500m", name="v")]
    nodes = [node("a", cpu="3"), node("b", cpu="2"), node("c", cpu="2")]
    results = {
        repr(place_gang(list(p), list(n)))
        for p in itertools.permutations(pods)
        for n in itertools.permutations(nodes)
    }
    assert len(results) == 1


def test_does_not_mutate_its_inputs() -> None:
    nodes = [node("a", used=res(cpu="1"))]
    reserved = {NodeName("a"): res(cpu="1")}
    before = (repr(nodes), repr(reserved))
    place_gang(gang(2), nodes, reserved=reserved)
    assert (repr(nodes), repr(reserved)) == before
