"""Admission metrics on hand-written event lists, with every number worked out by hand."""

from __future__ import annotations

import pytest

from muster.api.model import WorkloadKey
from muster.bench.kueue_perf import PlannedWorkload
from muster.bench.metrics import ClassWaits, measure, percentile
from muster.core.events import Event, EventType

QR, ADM, FIN = EventType.QUOTA_RESERVED, EventType.ADMITTED, EventType.FINISHED
PRE, EVI, REQ = EventType.PREEMPTED, EventType.EVICTED, EventType.REQUEUED


def planned(name: str, *, cls: str, cpu: int, at: float, cohort: str = "one") -> PlannedWorkload:
    return PlannedWorkload(
        key=WorkloadKey(f"ns/{name}"),
        workload_class=cls,
        cluster_queue=f"cq-{cohort}",
        cohort=cohort,
        cpu_milli=cpu * 1000,
        arrival_s=at,
    )


def ev(time: float, type_: EventType, name: str) -> Event:
    return Event(time=time, type=type_, object=f"ns/{name}")


# Cohort "one" (10 cpu): a runs 0-2 while b waits; b and c run from 2; d preempts c at 3;
# c waits until b finishes at 5. Cohort "two" (20 cpu): f waits 0.5-1 behind e, which fills it.
# Cohort "idle" never has work. Events in the order the engine reports them.
WORKLOADS = [
    planned("a", cls="small", cpu=4, at=0),
    planned("b", cls="large", cpu=8, at=0),
    planned("c", cls="small", cpu=2, at=1),
    planned("d", cls="large", cpu=2, at=3),
    planned("e", cls="large", cpu=20, at=0, cohort="two"),
    planned("f", cls="medium", cpu=10, at=0.5, cohort="two"),
]
NOMINAL = {"one": 10_000, "two": 20_000, "idle": 50_000}
EVENTS = [
    ev(0, QR, "a"),
    ev(0, ADM, "a"),
    ev(0, QR, "e"),
    ev(0, ADM, "e"),
    ev(1, FIN, "e"),
    ev(1, QR, "f"),
    ev(1, ADM, "f"),
    ev(2, FIN, "a"),
    ev(2, QR, "b"),
    ev(2, ADM, "b"),
    ev(2, QR, "c"),
    ev(2, ADM, "c"),
    ev(3, PRE, "c"),
    ev(3, EVI, "c"),
    ev(3, REQ, "c"),
    ev(3, QR, "d"),
    ev(3, ADM, "d"),
    ev(4, FIN, "f"),
    ev(5, FIN, "b"),
    ev(5, QR, "c"),
    ev(5, ADM, "c"),
    ev(6, FIN, "d"),
    ev(7, FIN, "c"),
]


def test_counts_admissions_preemptions_and_finishes_from_events() -> None:
    metrics = measure(EVENTS, WORKLOADS, cohort_nominal_milli=NOMINAL)

    assert (metrics.admissions, metrics.preemptions, metrics.finished) == (7, 1, 6)
    assert metrics.makespan_s == 7


def test_waits_run_from_arrival_to_the_first_quota_reservation_per_class() -> None:
    metrics = measure(EVENTS, WORKLOADS, cohort_nominal_milli=NOMINAL)

    assert metrics.waits == {
        # a waited 0, c 2 - 1 = 1 (its second reservation at 5 does not count)
        "small": ClassWaits(workloads=2, admitted=2, mean_s=0.5, p50_s=0, p99_s=1, max_s=1),
        # b waited 2, d and e 0
        "large": ClassWaits(workloads=3, admitted=3, mean_s=2 / 3, p50_s=0, p99_s=2, max_s=2),
        "medium": ClassWaits(workloads=1, admitted=1, mean_s=0.5, p50_s=0.5, p99_s=0.5, max_s=0.5),
    }


def test_mean_usage_averages_cohorts_over_the_time_their_work_waits() -> None:
    metrics = measure(EVENTS, WORKLOADS, cohort_nominal_milli=NOMINAL)

    # "one": 4/10 for 0-2 (b waits), 10/10 for 3-5 (c waits): (0.8 + 2) / 4 = 0.7.
    # "two": 20/20 for 0.5-1 (f waits): 1.0. "idle" never waits and does not count.
    assert metrics.mean_usage_while_waiting == pytest.approx(0.85, abs=1e-12)
    assert metrics.max_usage == 1.0


def test_a_workload_admitted_at_its_arrival_never_counts_as_waiting() -> None:
    workloads = [planned("x", cls="small", cpu=2, at=1), planned("y", cls="small", cpu=3, at=1)]
    events = [ev(1, QR, "x"), ev(1, QR, "y"), ev(2, FIN, "x"), ev(2, FIN, "y")]

    metrics = measure(events, workloads, cohort_nominal_milli={"one": 10_000})

    assert metrics.mean_usage_while_waiting is None
    assert metrics.max_usage == 0.5


def test_a_workload_never_admitted_waits_until_the_last_event_and_has_no_wait_time() -> None:
    workloads = [planned("x", cls="small", cpu=10, at=0), planned("y", cls="large", cpu=20, at=1)]
    events = [ev(0, QR, "x"), ev(4, FIN, "x")]

    metrics = measure(events, workloads, cohort_nominal_milli={"one": 10_000})

    # y waits 1-4: 10/10 for all of it.
    assert metrics.mean_usage_while_waiting == 1.0
    assert metrics.waits["large"] == ClassWaits(
        workloads=1, admitted=0, mean_s=None, p50_s=None, p99_s=None, max_s=None
    )


def test_ignores_events_about_workloads_it_did_not_plan() -> None:
    workloads = [planned("x", cls="small", cpu=5, at=0)]
    events = [ev(0, QR, "x"), ev(0, QR, "stranger"), ev(1, FIN, "x")]

    metrics = measure(events, workloads, cohort_nominal_milli={"one": 10_000})

    assert metrics.max_usage == 0.5
    assert metrics.waits["small"].admitted == 1


def test_a_repeated_reservation_without_release_holds_the_quota_once() -> None:
    workloads = [planned("x", cls="small", cpu=5, at=0)]
    events = [ev(0, QR, "x"), ev(0, QR, "x"), ev(1, FIN, "x")]

    assert measure(events, workloads, cohort_nominal_milli={"one": 10_000}).max_usage == 0.5


def test_no_events_give_zero_makespan_and_no_usage() -> None:
    metrics = measure([], [], cohort_nominal_milli={"one": 10_000})

    assert (metrics.admissions, metrics.makespan_s, metrics.max_usage) == (0, 0.0, 0.0)
    assert metrics.mean_usage_while_waiting is None
    assert metrics.waits == {}


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([1.0], 50, 1.0),
        ([1.0], 99, 1.0),
        ([1.0, 2.0], 50, 1.0),
        ([1.0, 2.0], 99, 2.0),
        ([float(v) for v in range(1, 101)], 50, 50.0),
        ([float(v) for v in range(1, 101)], 99, 99.0),
        ([float(v) for v in range(1, 201)], 99, 198.0),
        ([3.0, 5.0, 7.0], 0, 3.0),
    ],
)
def test_percentile_is_nearest_rank(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == expected
