"""The simulation loop with nodes: what reaches the engine, when a Kueue workload runs, pods
arriving before their gang object, and pods leaving with their workload."""

from __future__ import annotations

from sim_yaml import (
    cluster,
    node,
    pod,
    pods_ready_config,
    run,
    scheduling_workload,
    timeline,
    workload,
)

from muster.api import decode_yaml
from muster.api.model import CONFIG_TYPES
from muster.sim import SimulationResult, build_scenario
from muster.sim.report import render_table


def pods_of(result: SimulationResult) -> dict[str, tuple[str, str]]:
    """pod name -> (phase, node)."""
    return {p.pod.meta.name: (p.phase, p.node) for p in result.pods}


def test_cluster_objects_skip_the_engine_and_arrive_at_their_submit_after() -> None:
    objects, errors = decode_yaml(
        "---\n".join(
            [cluster(), node("late", after=50), node("early"), pod("p", after=5), workload("w")]
        ),
        source="test.yaml",
    )
    assert not errors, errors

    scenario = build_scenario(objects)

    assert all(isinstance(obj, CONFIG_TYPES) for obj in scenario.objects)
    arrivals = [(a.at_s, a.obj.meta.name) for a in scenario.cluster_arrivals]
    assert arrivals == [(0, "early"), (5, "p"), (50, "late")]
    assert scenario.placement
    assert [a.workload.meta.name for a in scenario.arrivals] == ["w"]


def test_without_a_node_pods_are_ignored_and_workloads_run_from_admission() -> None:
    result = run(cluster(), pod("p"), workload("w", runs=30))

    assert result.pods == ()
    assert result.nodes == ()
    assert timeline(result, "Admitted", "Finished") == [(0, "Admitted", "w"), (30, "Finished", "w")]


def test_a_kueue_workload_runs_from_the_binding_of_its_gang() -> None:
    result = run(cluster(), node("n1", after=10), workload("w", count=2, runs=30))

    assert timeline(result, "Admitted", "GangWaiting", "Bound", "Finished") == [
        (0, "Admitted", "w"),
        (0, "GangWaiting", "w"),
        (10, "Bound", "w"),
        (40, "Finished", "w"),
    ]
    timing = result.timings["team-a/w"]  # type: ignore[index]
    assert (timing.first_admitted_s, timing.ran_s) == (0, 30)
    assert pods_of(result) == {"w-main-0": ("Succeeded", "n1"), "w-main-1": ("Succeeded", "n1")}


def test_pods_are_ready_once_bound() -> None:
    result = run(
        pods_ready_config(timeout="30s"),
        cluster(),
        node("n1", after=5),
        workload("w", runs=60),
    )

    assert timeline(result, "Evicted") == []
    conditions = {c.type: c.status for c in result.workloads[0].conditions}
    assert conditions["PodsReady"] == "True"


def test_pods_of_a_basic_group_that_arrive_before_it_are_placed_one_at_a_time() -> None:
    result = run(
        node("n1", cpu="2"),
        *(pod(f"task-{i}", workload_ref="batch/tasks") for i in range(3)),
        scheduling_workload("batch", group="tasks", after=10),
    )

    bound = [(e.time, e.object) for e in result.events if e.type == "Bound"]
    assert bound == [(10, "team-a/task-0"), (10, "team-a/task-1")]
    assert pods_of(result)["task-2"] == ("Pending", "")


def test_a_preempted_kueue_workload_loses_its_pods() -> None:
    result = run(
        cluster(cpu="2", preemption="LowerPriority"),
        node("n1"),
        workload("low", cpu="1", count=2, priority=0),
        workload("high", cpu="2", priority=10, after=5, runs=10),
    )

    assert timeline(result, "Evicted", "Bound") == [
        (0, "Bound", "low"),
        (5, "Evicted", "low"),
        (5, "Bound", "high"),
        (15, "Bound", "low"),
    ]
    assert pods_of(result) == {
        "high-main-0": ("Succeeded", "n1"),
        "low-main-0": ("Running", "n1"),
        "low-main-1": ("Running", "n1"),
    }


def test_a_bare_pod_succeeds_after_its_run_seconds() -> None:
    result = run(node("n1"), pod("p", runs=12, after=3))

    (state,) = result.pods
    assert (state.phase, state.bound_s, state.ended_s) == ("Succeeded", 3, 15)


def test_the_table_tells_an_admitted_workload_without_nodes_from_a_running_one() -> None:
    result = run(
        cluster(),
        node("n1", cpu="2"),
        workload("fits", cpu="1", count=2),
        workload("waits", cpu="1", count=2, after=1),
        until_s=10,
    )

    rows = render_table(result).split("\n\n")[0].splitlines()[1:]
    outcomes = {row.split()[0]: row.split("  ")[-1].strip() for row in rows}
    assert outcomes == {"team-a/fits": "Running", "team-a/waits": "Admitted: waiting for nodes"}
