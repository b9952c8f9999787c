"""`muster bench placement` at a tiny scale: every case and mode, JSON rows and the table."""

from __future__ import annotations

import json
from typing import Any

import pytest

from muster.cli import bench
from muster.cli.main import main as muster

TINY = "0.001"  # 5 nodes, 1 pod placed before, 10 pods, 1 / 2 / 3 gangs of 3; then 50 nodes,
# 10 placed, 100 pods, 1 gang of 32

ROW_FIELDS = {
    "section",
    "case",
    "api",
    "mode",
    "scoring",
    "scale",
    "nodes",
    "placed_before",
    "pods",
    "gangs",
    "gang_size",
    "permitted",
    "passes",
    "wall_s",
    "pods_per_s",
    "ms_per_gang",
    "rss_mib",
    "target_pods_per_s",
    "target_ms_per_gang",
}


def json_rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_prints_one_json_row_per_case_and_mode_with_its_size(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = muster(["bench", "placement", "--scale", TINY, "-o", "json"])

    rows = json_rows(capsys.readouterr().out)
    assert status == 0
    assert all(set(row) == ROW_FIELDS for row in rows)
    assert [(r["case"], r["mode"], r["nodes"], r["pods"], r["gangs"]) for r in rows] == [
        ("pods", "batched", 5, 10, 0),
        ("pods", "streamed", 5, 10, 0),
        ("gangs", "batched", 5, 3, 1),
        ("gangs", "streamed", 5, 3, 1),
        ("gangs", "batched", 5, 6, 2),
        ("gangs", "streamed", 5, 6, 2),
        ("gangs", "batched", 5, 9, 3),
        ("gangs", "streamed", 5, 9, 3),
        # cluster scale (issue 19): 50 000 nodes, 100 000 pods, 1 000 gangs of 32
        ("pods", "batched", 50, 100, 0),
        ("pods", "streamed", 50, 100, 0),
        ("gangs", "batched", 50, 32, 1),
        ("gangs", "streamed", 50, 32, 1),
        # today's gang API beside v1.35's: gangs of 8, a big gang in racks, a tree of gangs
        ("podgroups of 8", "batched", 5, 8, 1),
        ("podgroups of 8", "batched", 5, 8, 1),
        ("podgroups of 8", "streamed", 5, 8, 1),
        ("podgroups of 8", "streamed", 5, 8, 1),
        ("podgroup of 1000, racks", "batched", 5, 1, 1),
        ("podgroup of 1000, racks", "batched", 5, 1, 1),
        ("tree 16x8", "batched", 5, 8, 1),
        ("tree 16x8", "batched", 5, 8, 1),
    ]
    assert [r["api"] for r in rows] == [""] * 12 + ["v1beta1", "v1alpha1"] * 4
    assert all(r["permitted"] == r["pods"] for r in rows)  # the cluster has room for all
    assert [r["passes"] for r in rows[:2]] == [1, 10]
    assert [r["passes"] for r in rows[8:10]] == [1, 100]
    assert [r["placed_before"] for r in rows] == [1, 1] + [0] * 6 + [10, 10] + [0] * 10
    assert [r["gang_size"] for r in rows[:12]] == [0, 0] + [3] * 6 + [0, 0, 32, 32]
    assert all(r["scoring"] == "binpack" and r["scale"] == 0.001 for r in rows)
    assert all(r["pods_per_s"] > 0 for r in rows)
    assert [r["ms_per_gang"] is None for r in rows] == [True, True] + [False] * 6 + [
        True,
        True,
    ] + [False] * 10
    assert all(r["rss_mib"] > 0 for r in rows[:12])
    assert [r["target_pods_per_s"] for r in rows[:12]] == [1500.0] * 2 + [None] * 6 + [
        5000.0,
        5000.0,
        None,
        None,
    ]
    assert [r["target_ms_per_gang"] for r in rows[8:12]] == [None, None, 5.0, 5.0]


def test_scoring_option_reaches_the_scheduler(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["placement", "--scale", TINY, "--scoring", "spread", "-o", "json"])

    rows = json_rows(capsys.readouterr().out)
    assert {r["scoring"] for r in rows} == {"spread"}
    assert all(r["permitted"] == r["pods"] for r in rows)


def test_table_has_a_header_a_line_per_row_and_the_targets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench.main(["placement", "--scale", TINY])

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "placement"
    assert lines[2].split() == [
        "CASE",
        "API",
        "MODE",
        "NODES",
        "PLACED",
        "PODS",
        "GANGS",
        "PERMITTED",
        "WALL(s)",
        "PODS/s",
        "MS/GANG",
        "RSS(MiB)",
    ]
    assert [line.split()[:3] for line in lines[3:11]] == [
        ["pods", "-", "batched"],
        ["pods", "-", "streamed"],
        *[["gangs", "-", mode] for _ in range(3) for mode in ("batched", "streamed")],
    ]
    assert [line.split()[:7] for line in lines[11:15]] == [
        ["pods", "-", "batched", "50", "10", "100", "-"],
        ["pods", "-", "streamed", "50", "10", "100", "-"],
        ["gangs", "-", "batched", "50", "0", "32", "1x32"],
        ["gangs", "-", "streamed", "50", "0", "32", "1x32"],
    ]
    notes = "\n".join(lines[23:])
    assert "podgroups of 8 v1beta1 streamed: <= 1 ms per gang:" in notes
    assert "tree 16x8 v1beta1 batched: <= 20 ms per decision:" in notes
    assert "pods streamed (5 nodes): >= 1500 pods/s:" in notes
    assert "gangs batched (5 nodes, 3 gangs of 3): <= 3 ms per gang:" in notes
    assert "pods streamed (50 nodes): >= 5000 pods/s:" in notes
    assert "gangs streamed (50 nodes, 1 gangs of 32): <= 5 ms per gang:" in notes
    assert "(counts scaled with --scale; the targets are for scale 1)" in notes
