"""gangpermit.state: gangs folded from events, decided whole, in priority then admission order."""

from __future__ import annotations

from google.protobuf.message import Message

from muster.api.quantity import parse_quantity
from muster.bus import new_event
from muster.cluster.objects import NodeView, PodPhase, PodView
from muster.contracts.v1 import events_pb2
from muster.core.gang import PodKey
from muster.gangpermit.snapshot import index_pods, node_capacities
from muster.gangpermit.state import Decision, GangState, Permit, Phase, TimedOut

SECOND = 1_000_000_000
TIMEOUT = 300 * SECOND


def node(name: str, cpu: str = "4") -> NodeView:
    return NodeView(
        name=name,
        labels={},
        taints=(),
        unschedulable=False,
        ready=True,
        allocatable={"cpu": int(parse_quantity(cpu)), "pods": 110_000},
    )


def pod(
    workload: str, i: int, *, cpu: str = "2", node_name: str = "", phase: PodPhase = "Pending"
) -> PodView:
    return PodView(
        namespace="ns",
        name=f"{workload}-main-{i}",
        uid=f"{workload}-{i}",
        workload=workload,
        pod_set="main",
        node_name=node_name,
        phase=phase,
        requests={"cpu": int(parse_quantity(cpu))},
        node_selector={},
        tolerations=(),
        scheduler_name="muster",
        run_seconds=None,
    )


def event(
    field: str, payload: Message, workload: str, *, seq: int, at_s: int = 0
) -> events_pb2.Envelope:
    env = new_event(
        field,
        payload,
        cluster="local",
        workload=f"ns/{workload}",
        source="test",
        now_ns=at_s * SECOND,
    )
    env.sequence = seq
    return env


class Feed:
    """Feeds a GangState events in order, numbering their sequences."""

    def __init__(self) -> None:
        self.state = GangState()
        self.seq = 0

    def __call__(self, field: str, payload: Message, workload: str, *, at_s: int = 0) -> bool:
        self.seq += 1
        return self.state.apply(event(field, payload, workload, seq=self.seq, at_s=at_s))

    def admit(self, workload: str, count: int, *, at_s: int = 0, priority: int = 0) -> None:
        self("submitted", events_pb2.WorkloadSubmitted(priority=priority), workload)
        assignment = events_pb2.PodSetAssignment(name="main", count=count)
        admission = events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
        self("admitted", events_pb2.WorkloadAdmitted(admission=admission), workload, at_s=at_s)

    def pending(self, workload: str, pods: list[PodView]) -> None:
        refs = [
            events_pb2.PodRef(namespace=p.namespace, name=p.name, pod_set=p.pod_set, uid=p.uid)
            for p in pods
            if p.workload == workload
        ]
        self("pods_pending", events_pb2.PodsPending(pods=refs), workload)


def decide(
    feed: Feed, nodes: list[NodeView], pods: list[PodView], *, now_s: int = 1
) -> list[Decision]:
    return feed.state.decide(
        node_capacities(nodes, pods), index_pods(pods), now_ns=now_s * SECOND, timeout_ns=TIMEOUT
    )


def test_permits_a_gang_once_all_its_pods_are_pending() -> None:
    feed = Feed()
    feed.admit("w", 3)
    pods = [pod("w", i) for i in range(3)]
    feed.pending("w", pods[:2])
    assert decide(feed, [node("a"), node("b")], pods) == []
    assert feed.state.gangs["ns/w"].last_reason == "2 of 3 pods pending"
    feed.pending("w", pods)
    [permit] = decide(feed, [node("a"), node("b")], pods)
    assert isinstance(permit, Permit)
    assert len(permit.placement.bindings) == 3


def test_a_gang_that_does_not_fit_waits_then_times_out_with_the_reason() -> None:
    feed = Feed()
    feed.admit("w", 4, at_s=10)
    pods = [pod("w", i) for i in range(4)]
    feed.pending("w", pods)
    nodes = [node("a"), node("b", cpu="2")]
    assert decide(feed, nodes, pods, now_s=11) == []
    [timed_out] = decide(feed, nodes, pods, now_s=310)
    assert isinstance(timed_out, TimedOut)
    assert "only 3 of 4 pods fit" in timed_out.message
    assert timed_out.message.startswith("gang of 4 pods not placed before the permit timeout")


def test_higher_priority_gang_is_placed_first_and_earlier_permits_reserve() -> None:
    feed = Feed()
    feed.admit("low", 2, at_s=1, priority=0)
    feed.admit("high", 2, at_s=2, priority=10)
    pods = [pod("low", i) for i in range(2)] + [pod("high", i) for i in range(2)]
    feed.pending("low", pods)
    feed.pending("high", pods)
    decisions = decide(feed, [node("a")], pods, now_s=3)
    assert [d.workload for d in decisions] == ["ns/high"]


def test_same_priority_goes_by_admission_time() -> None:
    feed = Feed()
    feed.admit("second", 2, at_s=2)
    feed.admit("first", 2, at_s=1)
    pods = [pod("second", i) for i in range(2)] + [pod("first", i) for i in range(2)]
    feed.pending("second", pods)
    feed.pending("first", pods)
    assert [d.workload for d in decide(feed, [node("a")], pods, now_s=3)] == ["ns/first"]


def test_a_permitted_gang_reserves_its_nodes_until_bound() -> None:
    feed = Feed()
    feed.admit("one", 2, at_s=1)
    pods = [pod("one", i) for i in range(2)]
    feed.pending("one", pods)
    [permit] = decide(feed, [node("a")], pods)
    assert isinstance(permit, Permit)
    feed.state.permitted("ns/one", permit.placement)
    assert feed.state.gangs["ns/one"].phase is Phase.PERMITTED
    feed.admit("two", 1, at_s=2)
    more = [*pods, pod("two", 0)]
    feed.pending("two", more)
    assert decide(feed, [node("a")], more) == []  # reserved for "one", not yet bound
    bound = [pod("one", i, node_name="a", phase="Running") for i in range(2)]
    feed("bound", events_pb2.PodsBound(), "one")
    assert "ns/one" not in feed.state.gangs
    assert decide(feed, [node("a")], [*bound, pod("two", 0)]) == []  # bound pods use the room
    done = [pod("one", i, node_name="a", phase="Succeeded") for i in range(2)]
    assert feed("finished", events_pb2.WorkloadFinished(succeeded=True), "one")
    [permit] = decide(feed, [node("a")], [*done, pod("two", 0)])
    assert permit.workload == "ns/two"


def test_replayed_permit_restores_the_reservation() -> None:
    feed = Feed()
    feed.admit("one", 1)
    binding = events_pb2.PodBinding(
        pod=events_pb2.PodRef(namespace="ns", name="one-main-0"), node="a"
    )
    feed("gang_permitted", events_pb2.GangPermitted(bindings=[binding]), "one")
    assert feed.state.reservations() == [(PodKey("ns/one-main-0"), "a")]
    assert feed.state.in_order() == []


def test_rejected_evicted_or_deleted_gangs_are_forgotten() -> None:
    feed = Feed()
    for name, field, payload in [
        ("r", "gang_rejected", events_pb2.GangRejected(reason="BindFailed")),
        ("e", "eviction_completed", events_pb2.EvictionCompleted()),
        ("d", "deleted", events_pb2.WorkloadDeleted()),
    ]:
        feed.admit(name, 1)
        feed(field, payload, name)
    assert feed.state.gangs == {}


def test_an_event_seen_again_changes_nothing() -> None:
    state = GangState()
    assignment = events_pb2.PodSetAssignment(name="main", count=1)
    admitted = event(
        "admitted",
        events_pb2.WorkloadAdmitted(
            admission=events_pb2.Admission(pod_set_assignments=[assignment])
        ),
        "w",
        seq=5,
    )
    assert state.apply(admitted)
    state.apply(event("bound", events_pb2.PodsBound(), "w", seq=6))
    assert not state.apply(admitted)
    assert state.gangs == {}
