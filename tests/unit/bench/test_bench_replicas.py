"""`bench e2e`'s per-replica comparison: which cases run, how rows at N shards meet their lone
replica, and the machine's wake yardstick."""

from __future__ import annotations

import pytest

from muster.bench import replicas, wake
from muster.bench.e2e import E2ERow, Load, loads, render


def case(shards: int, admission: float, *, offered: float | None = 200.0) -> E2ERow:
    return E2ERow(
        mode="burst" if offered is None else "rate",
        shards=shards,
        workloads=1000,
        per_call=1,
        offered_per_s=offered,
        admitted=1000,
        bound=1000,
        throughput_per_s=offered or 1000.0,
        admit_p50_ms=1.0,
        admit_p99_ms=3.0,
        bound_p50_ms=2.0,
        bound_p99_ms=4.0,
        cpu_ms_per_workload={"admission": admission, "total": 5.0},
    )


def test_a_lone_replica_is_also_paced_at_the_rate_each_of_n_replicas_sees() -> None:
    paced = [(x.shards, x.rate_per_s) for x in loads((1, 2, 4), 100) if x.rate_per_s]

    assert paced == [(1, 200.0), (1, 100.0), (1, 50.0), (2, 200.0), (4, 200.0)]


def test_without_a_lone_replica_there_is_nothing_to_pace_it_at() -> None:
    assert loads((4,), 10) == [
        Load(shards=4, workloads=30, rate_per_s=None, per_call=1),
        Load(shards=4, workloads=30, rate_per_s=None, per_call=16),
        Load(shards=4, workloads=10, rate_per_s=200.0),
    ]


def test_a_row_at_n_shards_is_set_beside_the_lone_replica_at_both_loads_and_paces() -> None:
    rows = [case(1, 0.60), case(1, 1.30, offered=50.0), case(4, 1.00)]
    wakes = [
        wake.WakeRow(rate_per_s=200.0, calls=600, cpu_us_per_call=100.0),
        wake.WakeRow(rate_per_s=50.0, calls=150, cpu_us_per_call=180.0),
    ]

    (row,) = replicas.compare(rows, wakes)

    assert (row.shards, row.admission_ms_per_workload, row.lone_ms_per_workload) == (4, 1.0, 0.6)
    assert row.per_replica_vs_lone == 0.42  # (1.00 / 4) / 0.60
    assert row.lone_same_pace_ms_per_workload == 1.30
    assert row.own_vs_lone_same_pace == 0.77  # 1.00 / 1.30
    assert row.wake_factor == 1.8
    text = render([*rows, *wakes, row])
    assert "PER REPLICA ÷ LONE" in text
    assert "0.42×" in text
    assert "1.80×" in text
    assert "CPU µs/call" in text


def test_bursts_compare_at_the_same_load_only_and_unmatched_rows_are_left_out() -> None:
    rows = [case(1, 0.24, offered=None), case(4, 0.60, offered=None), case(2, 0.8, offered=100.0)]

    (row,) = replicas.compare(rows, [])

    assert (row.case, row.shards, row.per_replica_vs_lone) == ("burst", 4, 0.62)
    assert row.lone_same_pace_ms_per_workload is None is row.wake_factor


def test_the_wake_yardstick_times_its_unit_in_cpu_at_the_pace_asked() -> None:
    row = wake.measure(500.0, seconds=0.04)

    assert (row.rate_per_s, row.calls) == (500.0, 20)
    assert row.cpu_us_per_call > 0
    with pytest.raises(ValueError, match="rate_per_s"):
        wake.measure(0.0, seconds=1.0)
