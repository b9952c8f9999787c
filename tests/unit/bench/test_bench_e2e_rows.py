"""`bench e2e` rows a process was missing from: marked, with what ended, never shown as valid."""

from __future__ import annotations

import msgspec

from muster.bench.e2e import E2ERow, render


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
