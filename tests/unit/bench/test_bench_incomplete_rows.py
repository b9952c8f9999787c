"""Rows of live sections whose work did not all finish (pods or Jobs never bound, workloads
never finished): the bench prints them and exits 1 naming them, so a script does not take a
timed-out case's rate for a measurement."""

from __future__ import annotations

from types import ModuleType

import msgspec
import pytest

from muster.bench import kueue_live, multicluster, placement_e2e
from muster.bench.kueue_live import KueueLiveRow
from muster.bench.multicluster import MultiClusterRow
from muster.bench.placement_e2e import PlacementE2ERow
from muster.cli.main import main as muster


def placement_row(bound: int) -> PlacementE2ERow:
    return PlacementE2ERow(nodes=100, pods=1000, gang_size=3, bound=bound, wall_s=1.0,
                           pods_per_s=float(bound), bound_p50_ms=1.0, bound_p99_ms=2.0)  # fmt: skip


def multicluster_row(bound: int) -> MultiClusterRow:
    return MultiClusterRow(case="multikueue", clusters=3, jobs=200, bound=bound, seconds=1.0,
                           jobs_per_s=float(bound), p50_ms=1.0, p99_ms=2.0)  # fmt: skip


def kueue_live_row(lost: int) -> KueueLiveRow:
    return KueueLiveRow(
        config="baseline", scale=1.0, shards=1, run_from="created", workloads=15000,
        cluster_queues=30, cohorts=5, finished=15000 - lost, lost=lost, preemptions=0,
        wall_s=80.0, virtual_makespan_s=70.0, mean_usage_pct=95.0, virtual_mean_usage_pct=97.0,
        admit={}, stages_ms={}, max_submit_lag_ms=1.0, cpu_s={"total": 1.0},
    )  # fmt: skip


CASES = [
    ("placement-e2e", placement_e2e, placement_row(1000), placement_row(998),
     "placement-e2e: 100 nodes, gangs of 3: 2 of 1000 pods never bound"),
    ("multicluster", multicluster, multicluster_row(200), multicluster_row(150),
     "multicluster: multikueue: 50 of 200 Jobs not bound before the case's time ran out"),
    ("kueue-live", kueue_live, kueue_live_row(0), kueue_live_row(7),
     "kueue-live: baseline: 7 of 15000 workloads never finished"),
]  # fmt: skip


@pytest.mark.parametrize("short_too", [True, False], ids=["short row", "whole rows only"])
@pytest.mark.parametrize(("section", "module", "whole", "short", "why"), CASES)
def test_a_row_whose_work_did_not_all_finish_makes_the_bench_exit_1_naming_it(
    section: str,
    module: ModuleType,
    whole: msgspec.Struct,
    short: msgspec.Struct,
    why: str,
    short_too: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [whole, short] if short_too else [whole]
    monkeypatch.setattr(module, "run", lambda **options: iter(rows))

    status = muster(["bench", section, "--scale", "0.01", "-o", "json"])

    out, err = capsys.readouterr()
    assert len(out.splitlines()) == len(rows)  # every row printed
    if short_too:
        assert (status, err) == (1, f"muster bench: 1 row(s) NOT VALID:\n  {why}\n")
    else:
        assert (status, err) == (0, "")
