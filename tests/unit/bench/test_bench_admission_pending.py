"""`muster bench admission --pending` at a tiny scale: rows, their sizes, the table."""

from __future__ import annotations

import json

import pytest

from muster.cli.main import main as muster


def test_pending_rows_default_to_the_three_sizes_scaled(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = muster(["bench", "admission", "--pending", "--scale", "0.001", "-o", "json"])

    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert status == 0
    assert [(r["section"], r["case"], r["pending"]) for r in rows] == [
        ("admission", "pending", 10),
        ("admission", "pending", 100),
        ("admission", "pending", 1000),
    ]
    for row in rows:
        assert (row["cluster_queues"], row["cohorts"], row["running"]) == (10, 1, 40)
        assert row["samples"] == max(10, row["pending"] // 10)
        renders = ("full", "arrival_p50", "arrival_p99", "release_p99")
        assert all(row[f"render_{kind}_ms"] > 0 for kind in renders)
        assert row["gauges_arrival_p50_ms"] > 0
        # The snapshot keeps the configuration (a flavor, 10 queue pairs) and every live
        # workload's story: submitted, then pending, or quota_reserved and admitted. As many
        # finished (the releases) as arrived (the arrivals): 40 + pending live at least.
        assert row["snapshot_events"] >= 21 + 2 * (40 + row["pending"])
        assert 0 < row["rss_base_mib"] < row["rss_peak_mib"]
        assert row["rss_loaded_mib"] <= row["rss_peak_mib"]
        assert 0 < row["rss_rebuilt_mib"] <= row["rss_peak_mib"]
        assert 0 < row["arrival_p50_ms"] <= row["arrival_p99_ms"]
        assert 0 < row["release_p50_ms"] <= row["release_p99_ms"]
        assert row["load_s"] > 0
        assert row["rebuild_s"] > 0


def test_pending_counts_given_are_run_as_given_in_a_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = muster(["bench", "admission", "--pending", "50", "--scale", "0.001"])

    lines = capsys.readouterr().out.splitlines()
    assert status == 0
    assert lines[0] == "admission"
    assert lines[2].split()[:4] == ["PENDING", "CQS", "RUNNING", "SAMPLES"]
    assert lines[3].split()[:4] == ["50", "10", "40", "10"]
    header = lines[2].split()  # the three RSS figures the target is about, side by side
    rss = header.index("RSS-LOADED(MiB)")
    assert header[rss : rss + 3] == ["RSS-LOADED(MiB)", "RSS-PEAK(MiB)", "RSS-REBUILT(MiB)"]


def test_a_pending_count_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        muster(["bench", "admission", "--pending", "0"])

    assert "--pending: must be >= 1" in str(exit_.value)
