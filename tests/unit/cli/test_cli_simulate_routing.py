"""`muster simulate --routing-policy`: the policy of ClusterQueues that name none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from muster.cli.main import main as muster

ROUTING = Path(__file__).parents[2] / "scenarios" / "routing"


def routed(args: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert muster(["simulate", *args, "-o", "json"]) == 0
    events = json.loads(capsys.readouterr().out)["events"]
    return [e for e in events if e["type"] == "Routed"]


def test_static_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert routed([str(ROUTING / "static-keeps-the-declared-queue.yaml")], capsys) == []


def test_the_flag_routes_where_the_cluster_queue_names_no_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenario = str(ROUTING / "static-keeps-the-declared-queue.yaml")

    (event,) = routed([scenario, "--routing-policy", "fastest"], capsys)

    assert (event["object"], event["reason"], event["from"], event["to"]) == (
        "ml/light",
        "Fastest",
        "gpu",
        "cpu",
    )


def test_a_cluster_queues_own_policy_wins_over_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenario = str(ROUTING / "threshold-moves.yaml")

    (event,) = routed([scenario, "--routing-policy", "static"], capsys)

    assert (event["reason"], event["to"]) == ("Threshold", "cpu")


def test_the_table_lists_routing_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(ROUTING / "threshold-moves.yaml")

    assert muster(["simulate", scenario]) == 0

    out = capsys.readouterr().out
    header, row = out.split("\n\n")[2].splitlines()
    assert header.split() == ["AT", "ROUTED", "FROM", "TO", "POLICY", "WHY"]
    assert row.split()[:5] == ["1", "ml/light", "gpu", "cpu", "Threshold"]
    assert "ml/light  gpu → cpu" not in out  # the workload row shows the queue it ran in
    assert "ml/light  cpu → cpu" in out


def test_rejects_an_unknown_policy(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        muster(["simulate", str(ROUTING / "threshold-moves.yaml"), "--routing-policy", "fast"])

    assert exit_info.value.code == 2
    assert "--routing-policy" in capsys.readouterr().err
