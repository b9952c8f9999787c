"""`bench e2e` rows a process was missing from: marked, with what ended, never shown as valid,
and the bench's exit status says so."""

from __future__ import annotations

import json

import msgspec
import pytest

from muster.bench import e2e
from muster.bench.e2e import E2ERow, render
from muster.cli.main import main as muster


def row(**changes: object) -> E2ERow:
    whole = E2ERow(
        mode="burst",
        shards=1,
        workloads=3000,
        per_call=1,
        offered_per_s=None,
        admitted=3000,
        bound=3000,
        throughput_per_s=450.0,
        admit_p50_ms=1.0,
        admit_p99_ms=3.0,
        bound_p50_ms=2.0,
        bound_p99_ms=4.0,
        cpu_ms_per_workload={"admission": 1.5, "total": 4.5},
    )
    return msgspec.structs.replace(whole, **changes)


def test_a_row_whose_admission_replica_ended_is_marked_not_valid() -> None:
    lost = row(ended=("admission-0",), throughput_per_s=90.0, cpu_ms_per_workload={"total": 3.0})

    text = render([row(), lost])

    assert not lost.valid
    assert (
        "NOT VALID: burst 1/call 1 shard(s), 3000 workloads: admission-0 ended during the case; "
        "its CPU and work are missing" in text
    )
    assert text.count("NOT VALID") == 1
    latency, cpu = text.split("\n\n")[:2]
    for table in (latency, cpu):
        header, whole_row, lost_row = table.splitlines()[:3]
        assert header.split()[-1] == "ENDED"
        assert whole_row.split()[-1] == "-"
        assert lost_row.split()[-1] == "admission-0"


def test_ended_rows_round_trip_through_json() -> None:
    lost = row(ended=("admission-0", "nats-server"))

    assert msgspec.json.decode(msgspec.json.encode(lost), type=E2ERow) == lost


@pytest.mark.parametrize("output", ["table", "json"])
def test_the_bench_exits_non_zero_naming_a_row_that_is_not_valid_after_printing_every_row(
    output: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lost = row(ended=("admission-0",), per_call=16)
    monkeypatch.setattr(e2e, "run", lambda **options: iter([row(), lost, row(mode="rate")]))

    status = muster(["bench", "e2e", "--scale", "0.01", "-o", output])

    out, err = capsys.readouterr()
    assert status == 1
    assert err == (
        "muster bench: 1 row(s) NOT VALID:\n"
        "  e2e: burst 16/call 1 shard(s), 3000 workloads: admission-0 ended during the case; "
        "its CPU and work are missing\n"
    )
    if output == "json":
        rows = [json.loads(line) for line in out.splitlines()]
        assert [(r["mode"], r["per_call"], r["ended"]) for r in rows] == [
            ("burst", 1, []),
            ("burst", 16, ["admission-0"]),
            ("rate", 1, []),
        ]
    else:
        latency = out.split("\n\n")[1].splitlines()
        assert [line.split()[-1] for line in latency[1:]] == ["-", "admission-0", "-"]


def test_the_bench_exits_zero_when_every_row_is_valid(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(e2e, "run", lambda **options: iter([row(), row(mode="rate")]))

    status = muster(["bench", "e2e", "--scale", "0.01", "-o", "json"])

    out, err = capsys.readouterr()
    assert status == 0
    assert (len(out.splitlines()), err) == (2, "")


def test_the_latency_table_says_which_event_bound_counts() -> None:
    """BOUND counts the watcher's `running` (the pods run on their nodes), and its header says
    so; a row stored before `bound_event` existed counted the binder's `bound`, and says that."""
    stored_before = msgspec.json.encode(row())
    old = {k: v for k, v in json.loads(stored_before).items() if k != "bound_event"}
    was = msgspec.json.decode(json.dumps(old), type=E2ERow)

    assert was.bound_event == "bound"
    header = e2e.render_latency([row(bound_event="running")]).splitlines()[0]
    assert "  BOUND (running)  " in header
    both = e2e.render_latency([was, row(bound_event="running")]).splitlines()[0]
    assert "  BOUND (bound|running)  " in both
