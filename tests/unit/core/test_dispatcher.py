"""MultiKueue's bookkeeping (`muster.core.dispatcher`), the one the admission service and the
simulator share: room held across a round and until placed, losses, fences, refusals."""

from __future__ import annotations

from muster.api.model import DispatchStrategy, WorkloadKey
from muster.core.dispatch import (
    ClusterCapacity,
    Demand,
    NoClusterFits,
    NodeRoom,
    PodSetDemand,
    Route,
)
from muster.core.dispatcher import (
    REFUSED_S,
    ClusterView,
    DispatcherState,
    Sent,
    Try,
    Waiting,
    Waits,
)

CPU = 1000
A, B = WorkloadKey("ml/a"), WorkloadKey("ml/b")


def demand(cpu: int) -> Demand:
    return Demand(
        pod_sets=(PodSetDemand(name="main", count=1, requests={"cpu": cpu * CPU, "pods": 1000}),)
    )


def worker(name: str, *, cpu: int, namespaces: set[str] | None = None) -> ClusterView:
    room = {"cpu": cpu * CPU, "pods": 110_000}
    capacity = ClusterCapacity(
        cluster=name, nodes=(NodeRoom(name=f"{name}-1", allocatable=room, free=room),)
    )
    return ClusterView(capacity=capacity, namespaces=namespaces)


def route(*clusters: str, strategy: DispatchStrategy = "first-fit") -> Route:
    return Route(check="mk", clusters=clusters, strategy=strategy)


def waiting(state: DispatcherState, *keys: WorkloadKey) -> None:
    for key in keys:
        state.wait(key, Waiting(checks=("mk",)))


def tries(*keys: WorkloadKey, cpu: int = 2, via: Route | None = None) -> list[Try]:
    return [Try(key=k, route=via or route("east", "west"), demand=demand(cpu)) for k in keys]


def sent_to(decisions: list[Sent | Waits]) -> dict[str, str]:
    return {d.key: d.cluster if isinstance(d, Sent) else "waits" for d in decisions}


def test_a_round_does_not_count_the_room_an_earlier_dispatch_took() -> None:
    state = DispatcherState()
    waiting(state, A, B)
    views = {"east": worker("east", cpu=3), "west": worker("west", cpu=8)}
    decisions = state.dispatch_round(tries(A, B), views, now_s=0.0)
    assert sent_to(decisions) == {"ml/a": "east", "ml/b": "west"}  # b no longer fits east
    assert state.waiting == {}
    assert state.targets == {A: "east", B: "west"}
    assert state.on == {"east": {A}, "west": {B}}


def test_held_room_counts_in_the_next_round_until_the_worker_reports_it_placed() -> None:
    state = DispatcherState()
    waiting(state, A)
    views = {"east": worker("east", cpu=3), "west": worker("west", cpu=8)}
    state.dispatch_round(tries(A), views, now_s=0.0)
    waiting(state, B)
    assert sent_to(state.dispatch_round(tries(B), views, now_s=1.0)) == {"ml/b": "west"}
    state.stopped(B)
    state.placed(["ml/a"], cluster="east")  # east's heartbeat now counts a's pods itself
    assert state.holds == {}
    waiting(state, B)
    assert sent_to(state.dispatch_round(tries(B), views, now_s=2.0)) == {"ml/b": "east"}


def test_a_workload_without_a_route_waits_with_why() -> None:
    state = DispatcherState()
    waiting(state, A)
    missing = Try(key=A, route=NoClusterFits(message="MultiKueueConfig workers not found"))
    (decision,) = state.dispatch_round([missing], {}, now_s=0.0)
    assert decision == Waits(key=A, checks=("mk",), message="MultiKueueConfig workers not found")
    assert A in state.waiting


def test_candidates_say_why_they_are_passed_over_in_order() -> None:
    state = DispatcherState()
    waiting(state, A)
    views = {
        "east": ClusterView(unavailable="no heartbeat yet"),
        "west": worker("west", cpu=8, namespaces={"other"}),
    }
    via = route("east", "west", "north")
    (decision,) = state.dispatch_round(tries(A, via=via), views, now_s=0.0)
    assert isinstance(decision, Waits)
    assert decision.message == (
        "no worker cluster can run it now: east: no heartbeat yet; "
        "west: namespace ml does not exist there; north: no MultiKueueCluster"
    )


def test_a_lost_worker_gives_its_workloads_and_fences_them_until_it_confirms() -> None:
    state = DispatcherState()
    waiting(state, A, B)
    views = {"east": worker("east", cpu=8), "west": worker("west", cpu=8)}
    state.dispatch_round(tries(A, B), views, now_s=0.0)
    assert state.running() == ["east"]
    assert state.lose("east") == [A, B]
    assert state.running() == []
    state.evicted_for_loss(A, "east")
    state.stopped(A)
    assert state.fenced == {A: {"east"}}
    assert not state.counts(A, "east", stops=False)  # a late report from east does not count
    waiting(state, A)
    (decision,) = state.dispatch_round(tries(A, via=route("east")), views, now_s=1.0)
    assert decision.message == "no worker cluster can run it now: east: still stopping it there"
    assert not state.counts(A, "east", stops=True)  # east stopped it: the fence lifts
    assert state.fenced == {}


def test_a_refusing_worker_is_passed_over_for_a_doubling_while() -> None:
    state = DispatcherState()
    views = {"east": worker("east", cpu=8)}
    state.refuse(A, "east", "namespace ml is terminating", now_s=0.0)
    state.refuse(A, "east", "namespace ml is terminating", now_s=0.0)
    waiting(state, A)
    via = route("east")
    (decision,) = state.dispatch_round(tries(A, via=via), views, now_s=2 * REFUSED_S - 1)
    assert decision.message == (
        "no worker cluster can run it now: east: refused it (namespace ml is terminating)"
    )
    (decision,) = state.dispatch_round(tries(A, via=via), views, now_s=2 * REFUSED_S)
    assert isinstance(decision, Sent)
    state.forget(A)
    assert (state.refusals, state.targets, state.last) == ({}, {}, {})
