"""`bench kueue-live` without the services: the manifests it submits say what the in-process
plan says, the live events read back as the simulator's, and the table judges the targets."""

from __future__ import annotations

from muster.api.decode import decode_yaml
from muster.api.model import ClusterQueue, LocalQueue, Workload
from muster.bench.kueue_live import ClassLatency, KueueLiveRow, render, stage_latency
from muster.bench.kueue_live_plan import (
    WARM_UP_QUEUE,
    LiveEvent,
    arrived,
    as_sim_events,
    config_manifest,
    warm_up_manifest,
    workload_manifests,
)
from muster.bench.kueue_perf import BASELINE, generate
from muster.core.events import EventType
from muster.sim.annotations import RUN_SECONDS, SUBMIT_AFTER

PLAN = generate(BASELINE, scale=0.001)


def test_the_submitted_configuration_decodes_to_the_plans_queues() -> None:
    objects, errors = decode_yaml(config_manifest(PLAN), source="kueue-live")

    assert errors == []
    planned = [o for o in PLAN.objects if isinstance(o, ClusterQueue | LocalQueue)]
    decoded = [o for o in objects if isinstance(o, ClusterQueue | LocalQueue)]
    by_name = {(type(o).__name__, o.meta.namespace, o.meta.name): o for o in decoded}
    for obj in planned:
        got = by_name[(type(obj).__name__, obj.meta.namespace, obj.meta.name)]
        if isinstance(obj, ClusterQueue):
            assert isinstance(got, ClusterQueue)
            assert (got.cohort, got.resource_groups, got.preemption, got.queueing_strategy) == (
                obj.cohort, obj.resource_groups, obj.preemption, obj.queueing_strategy
            )  # fmt: skip
        else:
            assert isinstance(got, LocalQueue)
            assert got.cluster_queue == obj.cluster_queue
    # Plus the warm-up queue, in no cohort, so it borrows from no one.
    warm_up = by_name[("ClusterQueue", "", WARM_UP_QUEUE)]
    assert isinstance(warm_up, ClusterQueue)
    assert not warm_up.cohort


def test_workloads_are_submitted_as_planned_but_without_the_simulators_arrival() -> None:
    manifests = workload_manifests(PLAN)

    planned: dict[str, Workload] = {o.key: o for o in PLAN.objects if isinstance(o, Workload)}
    assert list(manifests) == list(planned)
    for key, text in manifests.items():
        (wl,), errors = decode_yaml(text)
        assert errors == []
        assert isinstance(wl, Workload)
        want = planned[key]
        assert (wl.key, wl.priority, wl.pod_sets[0].requests) == (
            want.key, want.priority, want.pod_sets[0].requests
        )  # fmt: skip
        assert wl.meta.annotations == {RUN_SECONDS: want.meta.annotations[RUN_SECONDS]}
        assert SUBMIT_AFTER not in text
    (warm_up,), errors = decode_yaml(warm_up_manifest())
    assert errors == []
    assert isinstance(warm_up, Workload)
    assert warm_up.queue_name == WARM_UP_QUEUE


def test_live_events_become_the_simulators_timed_from_the_start() -> None:
    start = 1_000_000_000_000
    events = [
        LiveEvent("finished", "ns/a", start + 2_500_000_000),
        LiveEvent("quota_reserved", "ns/a", start + 500_000_000),
        LiveEvent("admitted", "ns/a", start + 500_000_000),  # the metrics read quota_reserved
        LiveEvent("eviction_completed", "ns/b", start + 1_000_000_000),
        LiveEvent("requeued", "ns/b", start + 1_000_000_000),
    ]

    sim = as_sim_events(events, start_ns=start)

    assert [(e.time, e.type, e.object) for e in sim] == [
        (0.5, EventType.QUOTA_RESERVED, "ns/a"),
        (1.0, EventType.EVICTED, "ns/b"),  # quota is released when the eviction completed
        (1.0, EventType.REQUEUED, "ns/b"),
        (2.5, EventType.FINISHED, "ns/a"),
    ]
    first = PLAN.workloads[0]
    (moved, *rest) = arrived(PLAN.workloads, {first.key: start + 250_000_000}, start_ns=start)
    assert moved.arrival_s == 0.25
    assert rest == list(PLAN.workloads[1:])


def test_an_admission_with_its_reservation_holds_quota_as_a_reservation_did() -> None:
    def at(s: float) -> int:
        return int(s * 1e9)

    def story(*admission: str) -> list[LiveEvent]:
        """One workload admitted, evicted, requeued and admitted again, in stream order."""
        return [
            *(LiveEvent(t, "ns/a", at(0.5)) for t in admission),
            LiveEvent("evicted", "ns/a", at(1.0)),
            LiveEvent("eviction_completed", "ns/a", at(1.2)),
            LiveEvent("requeued", "ns/a", at(1.2)),
            *(LiveEvent(t, "ns/a", at(2.0)) for t in admission),
            LiveEvent("finished", "ns/a", at(3.0)),
        ]

    now = as_sim_events(story("admitted"), start_ns=0)
    assert [(e.time, e.type) for e in now] == [
        (0.5, EventType.QUOTA_RESERVED),
        (1.2, EventType.EVICTED),
        (1.2, EventType.REQUEUED),
        (2.0, EventType.QUOTA_RESERVED),
        (3.0, EventType.FINISHED),
    ]
    assert as_sim_events(story("quota_reserved", "admitted"), start_ns=0) == now  # before


def test_stages_count_only_workloads_never_evicted_and_subtract_the_run_time() -> None:
    small, medium = [wl for wl in PLAN.workloads if wl.cluster_queue == "cq-0-0"][:2]
    ms = 1_000_000

    def path(key: str, run_ms: int, *, bind_ms: int) -> list[LiveEvent]:
        times = {"admitted": 0, "gang_permitted": bind_ms, "running": 30,
                 "finished": 30 + run_ms + 5}  # fmt: skip
        return [LiveEvent(t, key, at * ms) for t, at in times.items()]

    # The medium one was evicted once: its path is not one run's, whatever it shows.
    evicted = [*path(medium.key, 500, bind_ms=25), LiveEvent("evicted", medium.key, 1)]
    events = [*path(small.key, 200, bind_ms=10), *evicted]

    assert stage_latency(PLAN, events) == {
        "admitted->gang_permitted": (10.0, 10.0),
        "gang_permitted->running": (20.0, 20.0),
        "admitted->finished": (35.0, 35.0),  # less its run time
    }


def row(**changes: object) -> KueueLiveRow:
    fields: dict[str, object] = {
        "config": "baseline", "scale": 1.0, "shards": 1, "run_from": "created",
        "workloads": 15000, "cluster_queues": 30, "cohorts": 5, "finished": 15000, "lost": 0,
        "preemptions": 5000,
        "wall_s": 80.0, "virtual_makespan_s": 75.9, "mean_usage_pct": 95.0,
        "virtual_mean_usage_pct": 100.0,
        "admit": {"small": ClassLatency(workloads=10500, admitted=10500, p50_ms=50000.0,
                                        p99_ms=70000.0)},
        "stages_ms": {"admitted->finished": (40.0, 120.0)}, "max_submit_lag_ms": 3.0,
        "cpu_s": {"total": 100.0},
    }  # fmt: skip
    return KueueLiveRow(**{**fields, **changes})  # type: ignore[arg-type]


def test_the_table_says_which_targets_a_run_met() -> None:
    text = render([row(), row(wall_s=120.0, mean_usage_pct=80.0, lost=2)])

    lines = text.splitlines()
    assert lines[0].split()[:9] == [
        "CONFIG", "WORKLOADS", "CQs", "SHARDS", "RUN", "FROM", "WALL(s)", "VIRTUAL(s)", "RATIO"
    ]  # fmt: skip
    assert lines[1].split()[:7] == ["baseline", "15000", "30", "1", "created", "80", "75.9"]
    assert lines[1].split()[7] == "1.05"
    assert "50000/70000" in lines[1]
    assert "40/120" in lines[1]  # held beyond its run time
    notes = lines[4:]
    assert notes[:4] == [
        "baseline: wall <= 1.2x the virtual makespan: met (1.05x)",
        "baseline: wall <= 90 s (Kueue: 351 s): met (80 s)",
        "baseline: mean usage while work waits >= 90 %: met (95 %)",
        "baseline: workloads lost = 0: met (0)",
    ]
    assert notes[4:] == [
        "baseline: wall <= 1.2x the virtual makespan: MISSED (1.58x)",
        "baseline: wall <= 90 s (Kueue: 351 s): MISSED (120 s)",
        "baseline: mean usage while work waits >= 90 %: MISSED (80 %)",
        "baseline: workloads lost = 0: MISSED (2)",
    ]
