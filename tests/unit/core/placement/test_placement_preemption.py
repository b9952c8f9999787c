"""Placement preemption: whole lower-priority workloads, the fewest that make the gang fit, and
the room they free kept for the preemptor."""

from __future__ import annotations

from placement_cluster import (
    bound,
    gang,
    kinds,
    members,
    node,
    placements,
    pod,
    preempted,
    scheduler,
    waiting,
)

from muster.core.placement.model import GangKey, NodeName, PlacementPreempted, PodKey
from muster.core.placement.scheduler import GangScheduler


def test_evicts_the_whole_lower_priority_workload_even_where_one_pod_would_do() -> None:
    low = [
        bound(pod("low-0", cpu="4", workload="ns/low"), "n0"),
        bound(pod("low-1", cpu="4", workload="ns/low"), "n1"),
        pod("low-2", cpu="4", workload="ns/low"),  # pending: it goes with its workload
    ]
    s = scheduler(
        [node("n0"), node("n1")],
        gangs=[gang("high", 1, priority=10)],
        pods=[*low, *members("high", 1, cpu="4", priority=10)],
    )

    decisions = s.schedule(now_s=0)

    assert preempted(decisions) == [
        PlacementPreempted(
            gang=GangKey("ns/high"),
            victims=("ns/low",),
            pods=(PodKey("ns/low-0"), PodKey("ns/low-1"), PodKey("ns/low-2")),
        )
    ]
    status = s.gang_status(GangKey("ns/high"))
    assert status is not None
    assert status.phase == "Preempting"


def test_picks_the_fewest_lowest_priority_newest_workloads() -> None:
    held = [
        bound(pod(f"w{i}", cpu="4", workload=f"ns/w{i}", created_s=i), f"n{i}") for i in range(3)
    ]
    s = scheduler(
        [node(f"n{i}") for i in range(3)],
        gangs=[gang("high", 2, priority=10)],
        pods=[*held, *members("high", 2, cpu="4", priority=10)],
    )

    (decision,) = preempted(s.schedule(now_s=0))

    assert decision.victims == ("ns/w1", "ns/w2")


def test_drops_victims_that_turn_out_not_to_be_needed() -> None:
    s = scheduler(
        [node("n0"), node("n1")],
        gangs=[gang("high", 1, priority=10)],
        pods=[
            bound(pod("small", cpu="1", workload="ns/small", priority=0), "n0"),
            bound(pod("keeper", cpu="3", workload="ns/keeper", priority=20), "n0"),
            bound(pod("big", cpu="4", workload="ns/big", priority=1), "n1"),
            *members("high", 1, cpu="4", priority=10),
        ],
    )

    (decision,) = preempted(s.schedule(now_s=0))

    # small (lowest) was tried first and did not help; big alone does
    assert decision.victims == ("ns/big",)
    assert decision.pods == (PodKey("ns/big"),)


def test_never_evicts_equal_or_higher_priority_and_never_in_vain() -> None:
    equal = scheduler(
        [node("n0")],
        gangs=[gang("high", 1, priority=10)],
        pods=[
            bound(pod("peer", cpu="4", priority=10), "n0"),
            *members("high", 1, cpu="4", priority=10),
        ],
    )
    assert kinds(equal.schedule(now_s=0)) == [("GangWaiting", "high")]

    hopeless = scheduler(
        [node("n0"), node("n1")],
        gangs=[gang("high", 1, priority=10)],
        pods=[
            bound(pod("low", cpu="4"), "n0"),
            *members("high", 1, cpu="6", priority=10),
        ],
    )
    assert kinds(hopeless.schedule(now_s=0)) == [("GangWaiting", "high")]


def test_preemption_off_only_waits() -> None:
    s = scheduler(
        [node("n0")],
        gangs=[gang("high", 1, priority=10)],
        pods=[bound(pod("low", cpu="4"), "n0"), *members("high", 1, cpu="4", priority=10)],
        preemption=False,
    )

    assert waiting(s.schedule(now_s=0)) == {"high": "0/1 nodes are available: 1 Insufficient cpu"}


def test_nominated_room_goes_to_the_preemptor_not_to_lower_priority_pods() -> None:
    s = scheduler(
        [node("n0")],
        gangs=[gang("high", 1, priority=10)],
        pods=[
            bound(pod("low-0", cpu="2", workload="ns/low"), "n0"),
            bound(pod("low-1", cpu="2", workload="ns/low"), "n0"),
            *members("high", 1, cpu="4", priority=10),
        ],
    )
    assert preempted(s.schedule(now_s=0))

    s.upsert_pod(pod("sneaky", cpu="2", priority=5))
    s.remove_pod(PodKey("ns/low-0"))  # half the room is free, but it is nominated
    first = s.schedule(now_s=1)
    assert kinds(first) == [("GangWaiting", "sneaky")]
    assert s.free(NodeName("n0"))["cpu"] == -2000  # 2 free, 4 nominated

    s.remove_pod(PodKey("ns/low-1"))
    second = s.schedule(now_s=2)
    assert kinds(second) == [("GangPermitted", "high")]
    assert s.node_of(PodKey("ns/sneaky")) is None
    status = s.gang_status(GangKey("ns/high"))
    assert status is not None
    assert status.phase == "Permitted"


def test_higher_priority_pods_may_use_nominated_room() -> None:
    s = scheduler(
        [node("n0")],
        gangs=[gang("high", 1, priority=10)],
        pods=[bound(pod("low", cpu="4"), "n0"), *members("high", 1, cpu="4", priority=10)],
    )
    assert preempted(s.schedule(now_s=0))

    s.upsert_pod(pod("urgent", cpu="4", priority=50))
    s.remove_pod(PodKey("ns/low"))
    decisions = s.schedule(now_s=1)

    assert kinds(decisions) == [("GangPermitted", "urgent"), ("GangWaiting", "high")]
    assert s.node_of(PodKey("ns/high-0")) is None


def test_a_preemptor_that_times_out_gives_its_nominated_room_back() -> None:
    s = scheduler(
        [node("n0")],
        gangs=[gang("high", 1, priority=10, timeout_s=30)],
        pods=[
            bound(pod("low-0", cpu="2", workload="ns/low"), "n0"),
            bound(pod("low-1", cpu="2", workload="ns/low"), "n0"),
            *members("high", 1, cpu="4", priority=10),
        ],
    )
    assert preempted(s.schedule(now_s=0))
    s.upsert_pod(pod("sneaky", cpu="2", priority=5))
    s.remove_pod(PodKey("ns/low-0"))  # low-1 never goes
    assert kinds(s.schedule(now_s=1)) == [("GangWaiting", "sneaky")]

    decisions = s.schedule(now_s=30)

    assert kinds(decisions) == [("GangTimedOut", "high"), ("GangPermitted", "sneaky")]


def slow_victims(timeout_s: float = 30) -> GangScheduler:
    """Node n0 full with `low` (two pods), and `high` (priority 10, the whole node) that
    preempts it at 0 s, with a deadline of `timeout_s`."""
    s = scheduler(
        [node("n0")],
        gangs=[gang("high", 1, priority=10, timeout_s=timeout_s)],
        pods=[
            bound(pod("low-0", cpu="2", workload="ns/low"), "n0"),
            bound(pod("low-1", cpu="2", workload="ns/low"), "n0"),
            *members("high", 1, cpu="4", priority=10),
        ],
    )
    assert preempted(s.schedule(now_s=0))
    return s


def test_a_preemptor_timed_out_while_its_victims_stop_is_tried_again_once_they_are_gone() -> None:
    s = slow_victims()
    s.remove_pod(PodKey("ns/low-0"))
    assert kinds(s.schedule(now_s=30)) == [("GangTimedOut", "high")]  # low-1 still stopping
    assert s.schedule(now_s=40) == []

    s.remove_pod(PodKey("ns/low-1"))
    decisions = s.schedule(now_s=50)

    assert placements(decisions) == {"high-0": "n0"}
    status = s.gang_status(GangKey("ns/high"))
    assert status is not None
    assert status.phase == "Permitted"


def test_a_retried_preemptor_has_a_new_deadline_and_preempts_again_for_what_holds_its_room() -> (
    None
):
    s = slow_victims()
    assert kinds(s.schedule(now_s=30)) == [("GangTimedOut", "high")]
    s.upsert_pod(bound(pod("sneaky", cpu="2", priority=5), "n0"))  # took the room given back
    s.remove_pod(PodKey("ns/low-0"))
    assert s.schedule(now_s=31) == []  # low-1 still stopping: no new try yet

    s.remove_pod(PodKey("ns/low-1"))
    (again,) = preempted(s.schedule(now_s=40))

    assert again.victims == ("ns/sneaky",)
    status = s.gang_status(GangKey("ns/high"))
    assert status is not None
    assert (status.phase, status.deadline_s) == ("Preempting", 70)


def test_a_timed_out_gang_that_preempted_nothing_still_waits_for_its_own_change() -> None:
    s = scheduler(
        [node("n0")],
        gangs=[gang("high", 1, priority=10, timeout_s=30)],
        pods=[
            bound(pod("keeper", cpu="4", priority=20), "n0"),
            *members("high", 1, cpu="4", priority=10),
        ],
    )
    assert kinds(s.schedule(now_s=0)) == [("GangWaiting", "high")]
    assert kinds(s.schedule(now_s=30)) == [("GangTimedOut", "high")]

    s.remove_pod(PodKey("ns/keeper"))

    assert s.schedule(now_s=40) == []


def test_a_resource_first_seen_between_passes_does_not_upset_preemption() -> None:
    s = scheduler(
        [node("n0"), node("n1")],
        gangs=[gang("high", 1, priority=10)],
        pods=[
            bound(pod("low-a", cpu="4"), "n0"),
            bound(pod("low-b", cpu="4"), "n1"),
            *members("high", 1, cpu="4", priority=10),
        ],
    )
    assert preempted(s.schedule(now_s=0))
    s.upsert_gang(gang("next", 1, priority=10))
    s.upsert_pod(pod("next-0", gang="next", cpu="1", priority=10, example_com_fpga="1"))

    assert waiting(s.schedule(now_s=1)) == {
        "next": "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient example.com/fpga"
    }
