"""`muster bench floor`: muster's I/O per workload through stand-ins that decide nothing."""

from __future__ import annotations

import json

import pytest

from muster.bench import floor
from muster.bench import floor_wire as wire
from muster.cli import bench
from muster.cli.main import main as muster


def test_the_floor_stores_and_delivers_per_workload_what_e2e_counts_for_muster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = muster(["bench", "floor", "--scale", "0.004", "-o", "json"])

    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert status == 0
    assert (row["section"], row["what"], row["workloads"]) == ("floor", "floor", 12)
    assert row["went_through"] == 12
    # bench e2e's burst, one per Submit, as muster's launchers run it: 6 stored (`submitted` on
    # its name's subject, its claim; admitted, gang_permitted, the pod made on its node and
    # Running, running: no `bound`) and 13 delivered (the events' 7, each pod write to 3
    # watches; `bound` had no reader).
    assert (row["stored_per_workload"], row["delivered_per_workload"]) == (6, 13)
    assert row["layout"] == wire.LAYOUT
    assert (wire.STORED, wire.DELIVERED) == (6, 13)
    cpu = row["cpu_ms_per_workload"]
    assert set(cpu) == {*floor.PROCESSES}
    assert cpu["total"] > 0  # a dozen workloads: most processes' share is under a clock tick


def test_with_e2e_follows_each_floor_run_with_muster_s_burst(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def row(what: str, run: int, gateway: float) -> floor.FloorRow:
        return floor.FloorRow(
            what=what,
            run=run,
            workloads=30,
            went_through=30,
            throughput_per_s=100.0,
            cpu_ms_per_workload={"gateway": gateway, "total": 2 * gateway},
            stored_per_workload=9.0,
            delivered_per_workload=16.0,
            load_average=1.0,
        )

    async def fake_floor(workloads: int, run: int) -> floor.FloorRow:
        return row("floor", run, 0.25)

    monkeypatch.setattr(floor, "run_floor", fake_floor)
    monkeypatch.setattr(
        floor, "muster_row", lambda workloads, run, manifest: row(f"e2e {manifest}", run, 1.0)
    )

    status = bench.main(
        ["floor", "--scale", "0.01", "--runs", "2", "--with-e2e", "--manifest", "json"]
    )

    out = capsys.readouterr().out
    assert status == 0
    cases = [line.split()[:2] for line in out.splitlines() if line.startswith(("floor ", "e2e "))]
    assert cases == [
        ["floor", "1"], ["e2e", "json"], ["floor", "2"], ["e2e", "json"]
    ]  # fmt: skip
    shares = [line.split() for line in out.splitlines() if line.startswith("run ")]
    assert [(s[1], s[2], s[-2]) for s in shares] == [("1", "25", "25"), ("2", "25", "25")]


def test_a_floor_run_that_did_not_go_through_is_not_valid() -> None:
    short = floor.FloorRow(
        what="floor",
        run=1,
        workloads=30,
        went_through=29,
        throughput_per_s=1.0,
        cpu_ms_per_workload={},
        stored_per_workload=9.0,
        delivered_per_workload=16.0,
        load_average=1.0,
    )
    assert floor.not_valid(short) == "floor run 1: 29 of 30 workloads went through"
