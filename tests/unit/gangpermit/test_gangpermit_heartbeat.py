"""What gang-permit tells admission about its cluster (the MUSTER_CLUSTERS heartbeat): each
schedulable node's free room, and the Kueue workloads whose pods that room already counts."""

from __future__ import annotations

import pytest
from cluster_docs import fed, kueue_workload, node, objects, pod

from muster.gangpermit.service import (
    HEARTBEAT_MIN_S,
    GangPermitConfig,
    followed_subjects,
    heartbeat_rest_s,
)
from muster.gangpermit.translate import decide

CPU = 1000


def test_heartbeat_lists_free_room_of_schedulable_nodes_and_placed_workloads() -> None:
    cordoned = node("c", cpu="8")
    cordoned[0]["spec"] = {"unschedulable": True}
    state = fed(node("a", cpu="4") + node("b", cpu="2") + cordoned)
    for env in kueue_workload("job", 3):
        state.apply_event(env)
    assert state.capacity().placed == ()  # admitted, but no pod placed yet
    pods = [pod(f"job-main-{i}", labels={"muster.dev/workload": "job"})[0] for i in range(3)]
    for obj in objects(pods):
        state.put(obj)
    assert state.capacity().placed == ()  # pending pods take no room yet
    (permit,) = decide(state, now_s=1.0)
    assert permit.type == "workload.gang_permitted"

    capacity = state.capacity()
    assert capacity.cluster == "local"
    assert capacity.placed == ("ns/job",)
    assert [(n.name, n.free["cpu"], n.allocatable["cpu"]) for n in capacity.nodes] == [
        ("a", 1 * CPU, 4 * CPU),  # binpack: the three pods on a
        ("b", 2 * CPU, 2 * CPU),
    ]
    state.remove(objects(node("b"))[0])
    assert [n.name for n in state.capacity().nodes] == ["a"]


def test_specs_are_followed_on_every_cluster_and_the_rest_on_its_own() -> None:
    subjects = followed_subjects("east")
    assert "muster.v1.*.workload.submitted" in subjects
    assert "muster.v1.*.workload.finished" in subjects
    assert "muster.v1.east.workload.admitted" in subjects
    assert "muster.v1.east.workload.eviction_completed" in subjects


def test_heartbeat_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"must be a finite number >= 0\.01 seconds, got 0"):
        GangPermitConfig(cluster="local", heartbeat_s=0)


def test_a_heartbeat_that_takes_long_to_compute_rests_in_proportion() -> None:
    """A burst's passes wake the heartbeat at most ten times a second; a large cluster's
    room, which takes long to compute, is written less often, so that it takes at most a
    twentieth of the loop, but at least every --heartbeat-seconds."""
    config = GangPermitConfig(cluster="local")
    assert heartbeat_rest_s(0.0002, config) == HEARTBEAT_MIN_S  # a few nodes
    assert heartbeat_rest_s(0.042, config) == pytest.approx(0.84)  # 5 000 nodes
    assert heartbeat_rest_s(0.0, GangPermitConfig(cluster="local", heartbeat_s=0.05)) == 0.05
    # Never rarer than every --heartbeat-seconds: admission takes a silent cluster for lost.
    assert heartbeat_rest_s(0.42, config) == config.heartbeat_s  # 50 000 nodes


def test_a_heartbeat_looks_again_only_at_nodes_whose_room_changed() -> None:
    """Each node's room is kept from one heartbeat to the next (the same object, which the
    heartbeat's parts reuse unencoded) unless a pod, a permit or the node changed it."""
    state = fed(node("a", cpu="4") + node("b", cpu="2") + node("c", cpu="2"))
    for env in kueue_workload("job", 3):
        state.apply_event(env)
    before = state.capacity().nodes
    pods = [pod(f"job-main-{i}", labels={"muster.dev/workload": "job"})[0] for i in range(3)]
    for obj in objects(pods):
        state.put(obj)
    decide(state, now_s=1.0)  # binpack: the three pods on a
    after = state.capacity().nodes
    assert [n.free["cpu"] for n in after] == [1 * CPU, 2 * CPU, 2 * CPU]
    assert after[1] is before[1]
    assert after[2] is before[2]
    cordoned = node("b", cpu="2")
    cordoned[0]["spec"] = {"unschedulable": True}
    state.put(objects(cordoned)[0])
    state.put(objects(node("d", cpu="8"))[0])
    assert [(n.name, n.free["cpu"]) for n in state.capacity().nodes] == [
        ("a", 1 * CPU),
        ("c", 2 * CPU),
        ("d", 8 * CPU),
    ]
