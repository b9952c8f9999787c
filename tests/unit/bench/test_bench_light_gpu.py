"""`muster bench light-gpu`: rows, charts and the study's threshold behaviour, at small sizes."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from muster.bench.light_gpu import scenario_yaml
from muster.cli.main import main as muster

TINY = "0.001"  # two jobs per run: one GPU job, one light job
EXAMPLES = Path(__file__).parents[3] / "docs" / "examples" / "light-gpu"
PNG = b"\x89PNG\r\n\x1a\n"


def json_rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_writes_a_png_chart_per_run_and_the_yaml_per_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = muster(
        ["bench", "light-gpu", "--scale", TINY, "--charts", str(tmp_path), "-o", "json"]
    )

    rows = json_rows(capsys.readouterr().out)
    assert status == 0
    assert [(r["case"], r["arrivals"], r["policy"]) for r in rows] == [
        ("study", "uniform", "static"),
        ("study", "uniform", "threshold"),
        ("study", "uniform", "fastest"),
        ("study", "burst", "static"),
        ("study", "burst", "threshold"),
        ("study", "burst", "fastest"),
        ("tiered", "uniform", "static"),
        ("tiered", "uniform", "fastest"),
        ("tiered", "burst", "static"),
        ("tiered", "burst", "fastest"),
    ]
    for row in rows:
        assert (row["jobs"], row["light_jobs"], row["scale"]) == (2, 1, 0.001)
        assert (
            Path(row["chart"]) == tmp_path / f"{row['case']}-{row['arrivals']}-{row['policy']}.png"
        )
        assert Path(row["chart"]).read_bytes().startswith(PNG)
        assert sum(row["ran_in"].values()) == 2
    assert sorted(p.name for p in tmp_path.glob("*.yaml")) == [
        "study-burst.yaml",
        "study-uniform.yaml",
        "tiered-burst.yaml",
        "tiered-uniform.yaml",
    ]


def test_no_charts_draws_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    muster(["bench", "light-gpu", "--scale", TINY, "--no-charts", "-o", "json"])

    assert {row["chart"] for row in json_rows(capsys.readouterr().out)} == {""}


def test_the_table_names_the_default_chart_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    muster(["bench", "light-gpu", "--scale", TINY])

    out = capsys.readouterr().out
    (directory,) = tmp_path.glob("muster-light-gpu-*")
    assert out.splitlines()[0] == "light-gpu"
    assert out.splitlines()[2].split() == [
        "CASE", "ARRIVALS", "POLICY", "JOBS", "LIGHT", "MAKESPAN(s)", "REDUCTION%",
        "LIGHT-ON-CPU", "MOVES", "RAN-IN",
    ]  # fmt: skip
    assert f"charts and scenario YAML: {directory}\n" in out
    assert len(list(directory.glob("*.png"))) == 10


def test_threshold_moves_the_light_jobs_the_study_moved(
    capsys: pytest.CaptureFixture[str],
) -> None:
    muster(["bench", "light-gpu", "--no-charts", "-o", "json"])

    rows = {(r["case"], r["arrivals"], r["policy"]): r for r in json_rows(capsys.readouterr().out)}
    # uniform: the GPU queue first holds 10 pending at t=14; light jobs at t=15, 17 and 19 move,
    # then three reserve the CPU queue and the rest stay. burst: the first three light jobs.
    assert rows["study", "uniform", "threshold"]["moved_at_s"] == [15, 17, 19]
    assert rows["study", "burst", "threshold"]["moved_at_s"] == [1.5, 1.6, 1.7]
    for arrivals in ("uniform", "burst"):
        static = rows["study", arrivals, "static"]
        assert (static["light_on_cpu"], static["moved_at_s"], static["reduction_pct"]) == (0, [], 0)
        assert rows["study", arrivals, "threshold"]["light_on_cpu"] == 3
        assert rows["study", arrivals, "fastest"]["makespan_s"] < static["makespan_s"]


@pytest.mark.parametrize("arrivals", ["uniform", "burst"])
def test_the_documented_example_is_the_study_scenario(arrivals: str) -> None:
    assert (EXAMPLES / f"{arrivals}.yaml").read_text() == scenario_yaml("study", arrivals)


def test_without_matplotlib_charts_asked_for_fail_with_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as in the service image
    with pytest.raises(SystemExit) as exited:
        muster(["bench", "light-gpu", "--scale", TINY, "--charts", str(tmp_path)])
    assert exited.value.code == 2
    assert "pip install 'muster[bench]'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_without_matplotlib_the_default_run_prints_its_table_without_charts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert muster(["bench", "light-gpu", "--scale", TINY, "-o", "json"]) == 0
    out = capsys.readouterr()
    assert "no charts: matplotlib is not installed" in out.err
    assert all(row["chart"] == "" for row in json_rows(out.out))
