"""GangScheduler: gangs placed whole or not at all, in order, with a shared deadline."""

from __future__ import annotations

from typing import TypedDict

from placement_cluster import (
    bind_all,
    bound,
    gang,
    kinds,
    members,
    node,
    placements,
    pod,
    scheduler,
    timed_out,
    waiting,
)

from muster.core.placement.model import (
    Binding,
    GangKey,
    GangPermitted,
    GangStatus,
    GangTimedOut,
    GangWaiting,
    NodeInfo,
    NodeName,
    PodKey,
)


class Capacity(TypedDict):
    cpu: str
    memory: str


ONE_CPU: Capacity = {"cpu": "1", "memory": "4Gi"}


def small_nodes(count: int) -> list[NodeInfo]:
    return [node(f"n{i}", **ONE_CPU) for i in range(count)]


def test_gang_of_four_with_room_for_three_holds_nothing_until_a_fourth_node_appears() -> None:
    pods = members("train", 4)
    s = scheduler(small_nodes(3), gangs=[gang("train", 4)], pods=pods)

    first = s.schedule(now_s=0)

    assert first == [
        GangWaiting(
            gang=GangKey("ns/train"),
            reason="3 of 4 pods fit: 0/3 nodes are available: 3 Insufficient cpu",
            pending=4,
            min_count=4,
        )
    ]
    assert all(s.node_of(p.key) is None for p in pods)
    assert all(s.free(NodeName(f"n{i}"))["cpu"] == 1000 for i in range(3))

    s.upsert_node(node("n3", **ONE_CPU))
    second = s.schedule(now_s=1)

    assert kinds(second) == [("GangPermitted", "train")]
    assert sorted(placements(second).values()) == ["n0", "n1", "n2", "n3"]
    assert all(s.free(NodeName(f"n{i}"))["cpu"] == 0 for i in range(4))


def test_gang_waits_until_min_count_pods_are_pending() -> None:
    s = scheduler([node("n0")], gangs=[gang("g", 3)], pods=members("g", 2))

    assert waiting(s.schedule(now_s=0)) == {"g": "2 of 3 pods pending"}

    s.upsert_pod(pod("g-2", gang="g"))
    assert kinds(s.schedule(now_s=1)) == [("GangPermitted", "g")]


def test_pods_of_a_gang_wait_for_its_spec() -> None:
    s = scheduler([node("n0")], pods=members("g", 2))

    assert s.schedule(now_s=0) == [
        GangWaiting(
            gang=GangKey("ns/g"),
            reason="waiting for its Workload/PodGroup",
            pending=2,
            min_count=0,
        )
    ]
    s.upsert_gang(gang("g", 2))
    assert kinds(s.schedule(now_s=1)) == [("GangPermitted", "g")]


def test_two_gangs_that_fit_alone_but_not_together_one_waits_for_the_other() -> None:
    nodes = [node("n0", cpu="4"), node("n1", cpu="4")]
    a, b = members("a", 4, cpu="2"), members("b", 4, cpu="2")
    s = scheduler(
        nodes, gangs=[gang("a", 4, created_s=1), gang("b", 4, created_s=2)], pods=[*b, *a]
    )

    first = s.schedule(now_s=0)

    assert kinds(first) == [("GangPermitted", "a"), ("GangWaiting", "b")]
    assert waiting(first)["b"].startswith("0 of 4 pods fit: 0/2 nodes are available")
    bind_all(s, first, a)
    assert s.schedule(now_s=1) == []

    for p in a:
        s.remove_pod(p.key)
    second = s.schedule(now_s=10)
    assert kinds(second) == [("GangPermitted", "b")]
    assert sorted(placements(second)) == [p.key.removeprefix("ns/") for p in b]


def test_gangs_go_by_priority_then_creation_then_key() -> None:
    s = scheduler(
        [node("n0", cpu="2")],
        gangs=[
            gang("old", 2, created_s=1),
            gang("urgent", 2, priority=10, created_s=5),
            gang("older", 2, created_s=0),
        ],
        pods=[*members("old", 2), *members("urgent", 2), *members("older", 2)],
    )

    decisions = s.schedule(now_s=0)

    assert kinds(decisions) == [
        ("GangPermitted", "urgent"),
        ("GangWaiting", "older"),
        ("GangWaiting", "old"),
    ]


def test_pods_on_their_own_take_their_turn_among_gangs() -> None:
    s = scheduler(
        [node("n0", cpu="2")],
        gangs=[gang("g", 2, priority=5)],
        pods=[*members("g", 2), pod("solo", cpu="2", priority=9)],
    )

    decisions = s.schedule(now_s=0)

    assert kinds(decisions) == [("GangPermitted", "solo"), ("GangWaiting", "g")]
    solo = decisions[0]
    assert isinstance(solo, GangPermitted)
    assert solo.basic


def test_deadline_expiry_rejects_every_pending_pod_at_the_same_instant() -> None:
    pods = members("g", 4)
    s = scheduler(small_nodes(3), gangs=[gang("g", 4, timeout_s=30)], pods=pods)
    s.schedule(now_s=5)

    assert s.next_deadline_s() == 35
    assert s.schedule(now_s=34.9) == []
    expired = s.schedule(now_s=35)

    assert expired == [
        GangTimedOut(
            gang=GangKey("ns/g"),
            reason="not placed within 30s: 3 of 4 pods fit: 0/3 nodes are available: "
            "3 Insufficient cpu",
            pods=tuple(p.key for p in pods),
        )
    ]
    assert s.next_deadline_s() is None
    status = s.gang_status(GangKey("ns/g"))
    assert status is not None
    assert status.phase == "TimedOut"


def test_timed_out_gang_is_left_alone_until_one_of_its_pods_changes() -> None:
    s = scheduler(small_nodes(3), gangs=[gang("g", 4, timeout_s=10)], pods=members("g", 4))
    s.schedule(now_s=0)
    assert timed_out(s.schedule(now_s=10))

    s.upsert_node(node("n3", **ONE_CPU))
    assert s.schedule(now_s=11) == []

    s.upsert_pod(pod("g-4", gang="g"))
    decisions = s.schedule(now_s=12)
    # 5 pending, room for 4: the first 4 by key go; the fifth waits on its own
    assert kinds(decisions) == [("GangPermitted", "g"), ("GangWaiting", "g-4")]
    assert sorted(placements(decisions)) == ["g-0", "g-1", "g-2", "g-3"]


def test_changed_spec_restarts_a_timed_out_gang_with_a_new_deadline() -> None:
    s = scheduler(small_nodes(1), gangs=[gang("g", 2, timeout_s=10)], pods=members("g", 2))
    s.schedule(now_s=0)
    assert timed_out(s.schedule(now_s=10))

    s.upsert_gang(gang("g", 2, timeout_s=20))
    assert kinds(s.schedule(now_s=15)) == [("GangWaiting", "g")]
    assert s.next_deadline_s() == 35


def test_default_timeout_applies_when_the_gang_sets_none() -> None:
    s = scheduler(small_nodes(1), gangs=[gang("g", 2)], pods=members("g", 2), default_timeout_s=60)
    s.schedule(now_s=1)

    assert s.next_deadline_s() == 61
    assert timed_out(s.schedule(now_s=61))[0].reason.startswith("not placed within 60s: ")


def test_deadline_runs_from_the_first_attempt_even_if_pods_leave() -> None:
    s = scheduler(small_nodes(1), gangs=[gang("g", 2, timeout_s=10)], pods=members("g", 2))
    s.schedule(now_s=0)
    s.remove_pod(PodKey("ns/g-1"))
    assert waiting(s.schedule(now_s=1)) == {"g": "1 of 2 pods pending"}

    (expired,) = timed_out(s.schedule(now_s=10))
    assert expired.pods == (PodKey("ns/g-0"),)
    assert expired.reason == "not placed within 10s: 1 of 2 pods pending"


def test_waiting_is_reported_when_the_reason_changes_only() -> None:
    s = scheduler(small_nodes(1), gangs=[gang("g", 4)], pods=members("g", 2))

    assert waiting(s.schedule(now_s=0)) == {"g": "2 of 4 pods pending"}
    assert s.schedule(now_s=1) == []
    s.upsert_pod(pod("g-2", gang="g"))
    assert waiting(s.schedule(now_s=2)) == {"g": "3 of 4 pods pending"}
    s.upsert_pod(pod("g-3", gang="g"))
    assert waiting(s.schedule(now_s=3)) == {
        "g": "1 of 4 pods fit: 0/1 nodes are available: 1 Insufficient cpu"
    }
    s.upsert_node(node("n1", memory="1Gi"))  # room for one more, not for all
    assert waiting(s.schedule(now_s=4)) == {
        "g": "2 of 4 pods fit: 0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory"
    }
    s.upsert_node(node("n1", memory="1Gi"))  # the same node again: nothing changed
    s.upsert_pod(pod("g-3", gang="g"))  # the same pod again
    assert s.schedule(now_s=5) == []


def test_binding_turns_the_reservation_into_use_and_removal_frees_it() -> None:
    pods = members("g", 2)
    s = scheduler([node("n0", cpu="2")], gangs=[gang("g", 2)], pods=pods)
    decisions = s.schedule(now_s=0)
    assert s.free(NodeName("n0"))["cpu"] == 0
    assert s.free(NodeName("n0"))["pods"] == 108_000

    bind_all(s, decisions, pods)
    assert s.free(NodeName("n0"))["cpu"] == 0
    assert s.node_of(pods[0].key) == "n0"

    s.remove_pod(pods[0].key)
    assert s.free(NodeName("n0"))["cpu"] == 1000
    assert s.node_of(pods[0].key) is None


def test_bind_failed_releases_the_gang_and_retries_it_whole() -> None:
    pods = members("g", 2)
    s = scheduler([node("n0", cpu="2")], gangs=[gang("g", 2)], pods=pods)
    assert kinds(s.schedule(now_s=0)) == [("GangPermitted", "g")]

    s.bind_failed(GangKey("ns/g"))
    assert s.free(NodeName("n0"))["cpu"] == 2000
    assert s.node_of(pods[0].key) is None

    retried = s.schedule(now_s=1)
    assert kinds(retried) == [("GangPermitted", "g")]
    assert placements(retried) == {"g-0": "n0", "g-1": "n0"}


def test_bind_failed_keeps_the_pods_that_bound_and_places_the_rest() -> None:
    pods = members("g", 4)
    s = scheduler([node("n0", cpu="4")], gangs=[gang("g", 4)], pods=pods)
    decisions = s.schedule(now_s=0)
    bind_all(s, decisions, pods[:2])

    s.bind_failed(GangKey("ns/g"))
    assert s.free(NodeName("n0"))["cpu"] == 2000
    retried = s.schedule(now_s=1)

    assert kinds(retried) == [("GangPermitted", "g")]
    assert sorted(placements(retried)) == ["g-2", "g-3"]


def test_bind_failed_for_a_pod_on_its_own_retries_that_pod() -> None:
    s = scheduler([node("n0")], pods=[pod("solo")])
    assert kinds(s.schedule(now_s=0)) == [("GangPermitted", "solo")]

    s.bind_failed(GangKey("ns/solo"))
    assert s.node_of(PodKey("ns/solo")) is None
    assert kinds(s.schedule(now_s=1)) == [("GangPermitted", "solo")]


def test_pods_joining_a_permitted_gang_are_placed_on_their_own() -> None:
    pods = members("g", 2)
    s = scheduler([node("n0", cpu="4")], gangs=[gang("g", 2)], pods=pods)
    bind_all(s, s.schedule(now_s=0), pods)

    s.upsert_pod(pod("g-2", gang="g"))
    decisions = s.schedule(now_s=1)

    assert decisions == [
        GangPermitted(
            gang=GangKey("ns/g-2"),
            bindings=(Binding(pod=PodKey("ns/g-2"), node=NodeName("n0")),),
            basic=True,
        )
    ]


def test_more_pending_pods_than_min_count_all_go_if_they_fit_else_the_first_by_key() -> None:
    s = scheduler([node("n0", cpu="3")], gangs=[gang("g", 2)], pods=members("g", 3))
    assert sorted(placements(s.schedule(now_s=0))) == ["g-0", "g-1", "g-2"]

    t = scheduler([node("n0", cpu="2")], gangs=[gang("g", 2)], pods=members("g", 3))
    decisions = t.schedule(now_s=0)
    assert kinds(decisions) == [("GangPermitted", "g"), ("GangWaiting", "g-2")]
    assert sorted(placements(decisions)) == ["g-0", "g-1"]


def test_removed_gang_leaves_its_pending_pods_waiting_for_a_spec() -> None:
    s = scheduler(small_nodes(1), gangs=[gang("g", 2)], pods=members("g", 2))
    s.schedule(now_s=0)

    s.remove_gang(GangKey("ns/g"))
    assert waiting(s.schedule(now_s=1)) == {"g": "waiting for its Workload/PodGroup"}
    assert s.next_deadline_s() is None


def test_gang_views_show_phase_pending_count_and_deadline() -> None:
    s = scheduler(
        small_nodes(2),
        gangs=[gang("fits", 1), gang("big", 3, timeout_s=50)],
        pods=[*members("fits", 1), *members("big", 3)],
    )
    s.schedule(now_s=10)

    assert list(s.gangs()) == [
        GangStatus(
            gang=GangKey("ns/big"),
            phase="Waiting",
            reason="2 of 3 pods fit: 0/2 nodes are available: 2 Insufficient cpu",
            pending=3,
            min_count=3,
            deadline_s=60,
        ),
        GangStatus(
            gang=GangKey("ns/fits"),
            phase="Permitted",
            reason="",
            pending=0,
            min_count=1,
            deadline_s=None,
        ),
    ]
    assert s.gang_status(GangKey("ns/nope")) is None


def test_pods_bound_before_the_scheduler_started_count_as_used() -> None:
    s = scheduler(
        [node("n0", cpu="2"), node("n1", cpu="2")],
        pods=[bound(pod("old", cpu="2"), "n0"), pod("new", cpu="2")],
    )

    assert placements(s.schedule(now_s=0)) == {"new": "n1"}
