"""`muster run --virtual`: the built-in demo on the virtual clock, or the user's --scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.cli.main import main
from muster.sim import load_scenario_text, simulate
from muster.sim.demo import DEMO_YAML, SOURCE


def test_prints_a_header_and_one_row_per_demo_job(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["run", "--virtual"])

    out = capsys.readouterr().out
    assert status == 0
    header, table = out.split("\n\n", 1)
    assert header.startswith("Simulating the built-in demo")
    rows = table.split("\n\n")[0].splitlines()[1:]
    assert len(rows) == 10
    assert {row.split()[0].split("/")[0] for row in rows} == {"team-a", "team-b"}


def test_demo_finishes_every_job_after_exactly_one_preemption() -> None:
    result = simulate(load_scenario_text(DEMO_YAML, source=SOURCE))

    types = [str(event.type) for event in result.events]
    assert types.count("Preempted") == 1
    assert types.count("Finished") == 10
    preempted = next(e for e in result.events if e.type == "Preempted")
    assert preempted.by.startswith("team-b/job-urgent-train-")


def test_until_stops_the_demo_early(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["run", "--virtual", "--until", "10"])

    out = capsys.readouterr().out
    assert status == 0
    assert "until t=10s" in out.splitlines()[0]
    assert "Finished" not in out


def test_runs_the_users_scenario_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(DEMO_YAML.split("---\napiVersion: batch/v1")[0])

    status = main(["run", "--virtual", "--scenario", str(path)])

    out = capsys.readouterr().out
    assert status == 0
    assert out.startswith(f"Simulating {path}")
    assert len(out.split("\n\n")[1].splitlines()) == 1  # header only: no workloads


def test_bad_scenario_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["run", "--scenario", str(tmp_path / "missing.yaml")])

    captured = capsys.readouterr()
    assert (status, captured.out) == (2, "")
    assert "missing.yaml" in captured.err


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        # Each of these started services (or read a file) before: a sim-cluster that would not
        # start, a traceback, or /dev/zero read until memory ran out. Nothing starts now.
        (["--speed", "nan"], "--speed must be a finite number > 0, got nan"),
        (["--speed", "1e400"], "--speed must be a finite number > 0, got inf"),
        (["--shards", "99999"], "--shards must be 1 to 64, got 99999"),
        (["--cluster", "a.b"], "--cluster: cluster id must match [A-Za-z0-9_-]+, got 'a.b'"),
        (["--clusters", "east,dlq"], "--clusters: cluster id 'dlq' is reserved"),
        (
            ["--scenario", "/dev/zero"],
            "--scenario /dev/zero: not a regular file (a directory, pipe, socket or device)",
        ),
    ],
)
def test_hostile_flags_exit_2_before_anything_starts(
    capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    status = main(["run", *argv])

    assert (status, capsys.readouterr().err) == (2, f"muster run: {problem}\n")


def test_a_binary_scenario_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_bytes(b"\xd0\xcf\x11\xe0 not text")

    status = main(["run", "--scenario", str(path)])

    assert (
        status,
        capsys.readouterr().err.startswith(f"muster run: --scenario {path}: 'utf-8' codec"),
    ) == (
        2,
        True,
    )
