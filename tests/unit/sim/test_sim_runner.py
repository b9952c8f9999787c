"""The simulation loop against the real engine: arrivals, run times, checks, pods ready, --until."""

from __future__ import annotations

import pytest
from sim_yaml import admission_check, cluster, pods_ready_config, run, timeline, workload

from muster.api import decode_yaml
from muster.api.model import KueueConfig, WaitForPodsReadyConfig
from muster.sim import SimulationError, SimulationResult, run_scenario
from muster.sim.report import outcome


def test_finishes_run_seconds_after_admission() -> None:
    result = run(cluster(), workload("w", after=5, runs=30))

    assert timeline(result, "QuotaReserved", "Admitted", "Finished") == [
        (5, "QuotaReserved", "w"),
        (5, "Admitted", "w"),
        (35, "Finished", "w"),
    ]
    timing = result.timings["team-a/w"]  # type: ignore[index]
    assert (timing.arrived_s, timing.first_admitted_s, timing.ran_s, timing.finished_s) == (
        5,
        5,
        30,
        35,
    )
    assert result.end_s == 35


def test_waits_for_quota_until_the_running_workload_finishes() -> None:
    result = run(
        cluster(cpu="4"),
        workload("first", cpu="3", runs=20),
        workload("second", cpu="2", after=1, runs=5),
    )

    assert timeline(result, "Admitted", "Finished") == [
        (0, "Admitted", "first"),
        (20, "Finished", "first"),
        (20, "Admitted", "second"),
        (25, "Finished", "second"),
    ]
    second = result.timings["team-a/second"]  # type: ignore[index]
    assert second.first_admitted_s is not None
    assert second.first_admitted_s - second.arrived_s == 19


def test_runs_until_the_end_without_run_seconds() -> None:
    result = run(cluster(), workload("forever", after=2), until_s=50)

    assert timeline(result, "Finished") == []
    assert result.timings["team-a/forever"].ran_s == 48  # type: ignore[index]
    assert result.end_s == 50


def test_until_cuts_the_run_and_leaves_later_arrivals_out() -> None:
    result = run(cluster(), workload("early", runs=100), workload("late", after=60), until_s=30)

    assert [wl.meta.name for wl in result.workloads] == ["early"]
    assert all(event.time <= 30 for event in result.events)
    assert result.timings["team-a/early"].finished_s is None  # type: ignore[index]


def test_same_time_arrivals_keep_creation_timestamp_order() -> None:
    result = run(
        cluster(cpu="1"),
        workload("b", created="2024-01-01T00:00:02Z", runs=10),
        workload("a", created="2024-01-01T00:00:01Z", runs=10),
    )

    assert timeline(result, "Admitted") == [(0, "Admitted", "a"), (10, "Admitted", "b")]


def test_preempted_workload_runs_its_full_time_again_after_readmission() -> None:
    result = run(
        cluster(cpu="2", preemption="LowerPriority"),
        workload("low", cpu="2", priority=1, runs=30),
        workload("high", cpu="2", priority=100, after=10, runs=5),
    )

    assert timeline(result, "Admitted", "Evicted", "Finished") == [
        (0, "Admitted", "low"),
        (10, "Evicted", "low"),
        (10, "Admitted", "high"),
        (15, "Finished", "high"),
        (15, "Admitted", "low"),
        (45, "Finished", "low"),
    ]
    low = result.timings["team-a/low"]  # type: ignore[index]
    assert (low.ran_s, low.evictions, low.finished_s) == (40, 1, 45)


def test_admission_check_answer_comes_after_its_delay() -> None:
    result = run(
        admission_check("prov", result="Ready@30"),
        cluster(checks=("prov",)),
        workload("w", runs=10),
    )

    assert timeline(result, "QuotaReserved", "Admitted", "Finished") == [
        (0, "QuotaReserved", "w"),
        (30, "Admitted", "w"),
        (40, "Finished", "w"),
    ]


def test_workload_annotation_wins_over_the_admission_check_default() -> None:
    result = run(
        admission_check("prov", result="Ready@30"),
        cluster(checks=("prov",)),
        workload("w", runs=10, annotations={"muster.dev/check.prov": "Ready@2"}),
    )

    assert timeline(result, "Admitted") == [(2, "Admitted", "w")]


def test_retry_then_ready_uses_the_next_element_for_the_next_reservation() -> None:
    result = run(
        admission_check("prov"),
        cluster(checks=("prov",)),
        workload("w", runs=10, annotations={"muster.dev/check.prov": "Retry@5,Ready@7"}),
    )

    reserved = timeline(result, "QuotaReserved")
    admitted = timeline(result, "Admitted")
    assert len(reserved) == 2
    assert reserved[0][0] == 0
    assert admitted == [(reserved[1][0] + 7, "Admitted", "w")]


def test_rejected_check_deactivates_the_workload() -> None:
    result = run(
        admission_check("prov", result="Rejected@1"),
        cluster(checks=("prov",)),
        workload("w", runs=10),
    )

    assert timeline(result, "Admitted", "Finished") == []
    (wl,) = result.workloads
    assert not wl.active
    assert outcome(wl) == "Rejected"


def test_pods_never_ready_evicts_after_the_timeout() -> None:
    result = run(
        pods_ready_config(timeout="10s"),
        cluster(),
        workload("w", runs=100, annotations={"muster.dev/pods-ready-after": "never"}),
        until_s=30,
    )

    evicted = timeline(result, "Evicted")
    assert evicted
    assert evicted[0][0] == 10
    assert timeline(result, "Finished") == []


def test_pods_ready_in_time_keep_the_workload_running() -> None:
    result = run(
        pods_ready_config(timeout="10s"),
        cluster(),
        workload("w", runs=100, annotations={"muster.dev/pods-ready-after": "3"}),
    )

    assert timeline(result, "Evicted") == []
    assert timeline(result, "Finished") == [(100, "Finished", "w")]


def recovering(after: str, lost_for: str) -> dict[str, str]:
    """Pods ready at once, one not ready `after` seconds later, for `lost_for` seconds."""
    return {"muster.dev/pods-unready-after": after, "muster.dev/pods-unready-for": lost_for}


def pods_ready_condition(result: SimulationResult) -> tuple[str, str, str]:
    (wl,) = result.workloads
    (cond,) = [c for c in wl.conditions if c.type == "PodsReady"]
    return cond.status, cond.reason, cond.message


def test_readiness_lost_past_the_recovery_timeout_evicts_then_backs_off() -> None:
    result = run(
        pods_ready_config(timeout="10s", recovery="5s"),
        cluster(),
        workload("w", runs=100, annotations=recovering("20", "never")),
        until_s=30,
    )

    # Lost at 20, evicted at 25 (not before): the recovery timeout, not the start's 10 s.
    evicted = [e for e in result.events if e.type == "Evicted"]
    assert [(e.time, e.reason, e.message) for e in evicted] == [
        (25, "PodsReadyTimeout", "Exceeded the PodsReady timeout team-a/w")
    ]
    assert timeline(result, "Admitted", "Finished") == [(0, "Admitted", "w")]
    (wl,) = result.workloads
    (requeued,) = [c for c in wl.conditions if c.type == "Requeued"]
    assert (requeued.status, requeued.reason, requeued.message) == (
        "False",
        "PodsReadyTimeout",
        "Exceeded the PodsReady timeout team-a/w",  # Kueue's: the eviction's message
    )


def test_readiness_lost_again_after_each_admission_counts_toward_the_backoff_limit() -> None:
    config = pods_ready_config(timeout="10s", recovery="5s").replace(
        "}\n", ", requeuingStrategy: {backoffBaseSeconds: 1, backoffLimitCount: 1}}\n"
    )
    result = run(config, cluster(), workload("w", runs=100, annotations=recovering("20", "never")))

    # Ready at each admission, lost 20 s later: readiness does not reset the count (Kueue's).
    # The second timeout would pass the limit: deactivated instead, as Kueue's reconciler does.
    assert timeline(result, "Admitted", "Evicted", "Deactivated") == [
        (0, "Admitted", "w"),
        (25, "Evicted", "w"),
        (26, "Admitted", "w"),
        (51, "Evicted", "w"),
    ]
    evicted = [e.reason for e in result.events if e.type == "Evicted"]
    assert evicted == ["PodsReadyTimeout", "DeactivatedDueToRequeuingLimitExceeded"]
    (wl,) = result.workloads
    conditions = {c.type: (c.status, c.reason) for c in wl.conditions}
    assert conditions["Requeued"] == ("False", "DeactivatedDueToRequeuingLimitExceeded")
    assert conditions["QuotaReserved"] == ("False", "Deactivated")


def test_readiness_regained_within_the_recovery_timeout_keeps_it_admitted() -> None:
    result = run(
        pods_ready_config(timeout="10s", recovery="5s"),
        cluster(),
        workload("w", runs=100, annotations=recovering("20", "4")),
    )

    assert timeline(result, "Evicted") == []
    assert timeline(result, "Finished") == [(100, "Finished", "w")]


def test_readiness_lost_waits_for_recovery_without_a_recovery_timeout() -> None:
    result = run(
        pods_ready_config(timeout="10s"),
        cluster(),
        workload("w", runs=100, annotations=recovering("20", "never")),
        until_s=50,
    )

    assert timeline(result, "Evicted") == []
    assert pods_ready_condition(result) == (
        "False",
        "WaitForRecovery",
        "At least one pod has failed, waiting for recovery",
    )


def test_readiness_regained_reads_recovered() -> None:
    result = run(
        pods_ready_config(timeout="10s"),
        cluster(),
        workload("w", runs=100, annotations=recovering("20", "30")),
        until_s=60,
    )

    assert pods_ready_condition(result)[:2] == ("True", "Recovered")


def test_already_admitted_workload_holds_its_quota_from_t0() -> None:
    admitted = workload("old", cpu="4", runs=10) + (
        "status:\n"
        "  admission:\n"
        "    clusterQueue: main\n"
        "    podSetAssignments:\n"
        "    - {name: main, flavors: {cpu: default}, count: 1, resourceUsage: {cpu: '4'}}\n"
    )
    result = run(cluster(cpu="4"), admitted, workload("new", cpu="1", after=1, runs=1))

    assert timeline(result, "Admitted", "Finished") == [
        (0, "Admitted", "old"),
        (10, "Finished", "old"),
        (10, "Admitted", "new"),
        (11, "Finished", "new"),
    ]


def test_run_scenario_takes_decoded_objects_and_a_config() -> None:
    objects, errors = decode_yaml(
        "---\n".join(
            [
                cluster(),
                workload("w", runs=100, annotations={"muster.dev/pods-ready-after": "never"}),
            ]
        )
    )
    assert not errors
    config = KueueConfig(wait_for_pods_ready=WaitForPodsReadyConfig(enable=True, timeout_seconds=5))

    result = run_scenario(objects, config=config, until_s=20)

    assert isinstance(result, SimulationResult)
    assert timeline(result, "Evicted")[0][0] == 5


def test_same_input_gives_the_same_events() -> None:
    documents = [cluster(cpu="2")] + [
        workload(f"w{i}", cpu="1", after=i % 3, runs=1 + i % 4) for i in range(20)
    ]

    assert run(*documents).events == run(*documents).events


@pytest.mark.parametrize("count", [1, 200])
def test_every_workload_finishes_when_all_have_run_seconds(count: int) -> None:
    documents = [cluster(cpu="8")] + [
        workload(f"w{i}", cpu="1", after=i // 10, runs=3) for i in range(count)
    ]

    result = run(*documents)

    assert len(timeline(result, "Finished")) == count
    assert result.cluster_queues[0].reserving_workloads == 0


def test_a_check_that_retries_at_once_forever_is_reported_not_looped() -> None:
    with pytest.raises(SimulationError, match="t=0: still busy after"):
        run(
            admission_check("prov", result="Retry"),
            cluster(checks=("prov",)),
            workload("w", runs=10),
        )
