"""`bench e2e`'s per-replica comparison: does adding admission replicas divide admission's work?

Issue 19's measure is one replica's CPU per workload at N shards (all replicas' CPU ÷ N) against
the lone replica's at the same offered load: ideally 1/N. On a small shared machine that mixes
two things: the work each replica does, and what the machine charges for waking it up N times
less often (`bench.wake`). So each paced row at N shards is also set beside a lone replica paced
at the rate each of the N replicas sees (offered ÷ N): if no replica does another's work, a
replica of N spends per workload it owns no more than the lone one at that same pace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

import msgspec

from muster.bench.table import Column, number, render_table
from muster.bench.wake import WakeRow

SECTION: Final = "e2e"
MODE: Final = "per-replica"


class Case(Protocol):
    """What this needs of one `bench e2e` row (an `E2ERow` has all of it)."""

    @property
    def mode(self) -> str: ...
    @property
    def shards(self) -> int: ...
    @property
    def per_call(self) -> int: ...
    @property
    def offered_per_s(self) -> float | None: ...
    @property
    def cpu_ms_per_workload(self) -> dict[str, float]: ...


class ReplicaRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    mode: str = MODE
    case: str  # "burst" or "rate", as the e2e row compared
    per_call: int
    shards: int
    offered_per_s: float | None
    admission_ms_per_workload: float  # all N replicas together
    lone_ms_per_workload: float  # one replica, the same load
    per_replica_vs_lone: float  # (all ÷ N) ÷ lone: issue 19's ratio
    # A lone replica paced at offered ÷ N, and a replica of N's CPU per workload it owns against
    # it (None for bursts: no pace to match).
    lone_same_pace_ms_per_workload: float | None = None
    own_vs_lone_same_pace: float | None = None
    # The machine's charge for that pace: `bench.wake`'s cost at offered ÷ N over at offered.
    wake_factor: float | None = None


def paced_loads(shard_counts: Sequence[int], rate_per_s: float) -> list[float]:
    """The extra paces a lone replica runs at so that each N > 1 has its match (offered ÷ N);
    none without a lone replica to compare."""
    if 1 not in shard_counts:
        return []
    return [rate_per_s / n for n in sorted(set(shard_counts)) if n > 1]


def compare(cases: Sequence[Case], wakes: Sequence[WakeRow]) -> list[ReplicaRow]:
    """One row per e2e row at N > 1 shards that has its lone-replica match in `cases`."""
    lone = {(c.mode, c.per_call, c.offered_per_s): c for c in cases if c.shards == 1}
    wake = {w.rate_per_s: w.cpu_us_per_call for w in wakes}
    out: list[ReplicaRow] = []
    for case in cases:
        base = lone.get((case.mode, case.per_call, case.offered_per_s))
        if case.shards < 2 or base is None:
            continue
        spent = case.cpu_ms_per_workload.get("admission", 0.0)
        alone = base.cpu_ms_per_workload.get("admission", 0.0)
        row = ReplicaRow(
            case=case.mode,
            per_call=case.per_call,
            shards=case.shards,
            offered_per_s=case.offered_per_s,
            admission_ms_per_workload=spent,
            lone_ms_per_workload=alone,
            per_replica_vs_lone=_ratio(spent / case.shards, alone),
        )
        if case.offered_per_s is not None:
            pace = case.offered_per_s / case.shards
            matched = lone.get((case.mode, case.per_call, pace))
            if matched is not None:
                paced = matched.cpu_ms_per_workload.get("admission", 0.0)
                row = msgspec.structs.replace(
                    row,
                    lone_same_pace_ms_per_workload=paced,
                    own_vs_lone_same_pace=_ratio(spent, paced),
                )
            if pace in wake and case.offered_per_s in wake:
                row = msgspec.structs.replace(
                    row, wake_factor=_ratio(wake[pace], wake[case.offered_per_s])
                )
        out.append(row)
    return out


def _ratio(part: float, whole: float) -> float:
    return round(part / whole, 2) if whole > 0 else 0.0


def render(rows: Sequence[ReplicaRow]) -> str:
    columns: list[Column[ReplicaRow]] = [
        Column("ADMISSION per replica", lambda r: r.case, numeric=False),
        Column("PER CALL", lambda r: str(r.per_call)),
        Column("SHARDS", lambda r: str(r.shards)),
        Column("OFFERED/s", lambda r: number(r.offered_per_s)),
        Column("ALL ms/wl", lambda r: f"{r.admission_ms_per_workload:.2f}"),
        Column("LONE ms/wl", lambda r: f"{r.lone_ms_per_workload:.2f}"),
        Column("PER REPLICA ÷ LONE", lambda r: f"{r.per_replica_vs_lone:.2f}×"),
        Column("LONE AT OFFERED/N ms/wl", lambda r: _cell(r.lone_same_pace_ms_per_workload)),
        Column("OWN ÷ LONE AT SAME PACE", lambda r: _cell(r.own_vs_lone_same_pace, "×")),
        Column("MACHINE WAKE FACTOR", lambda r: _cell(r.wake_factor, "×")),
    ]
    return render_table(columns, rows)


def render_wake(rows: Sequence[WakeRow]) -> str:
    columns: list[Column[WakeRow]] = [
        Column("MACHINE: fixed unit, asleep between calls", lambda r: "wake", numeric=False),
        Column("RATE/s", lambda r: number(r.rate_per_s)),
        Column("CALLS", lambda r: str(r.calls)),
        Column("CPU µs/call", lambda r: f"{r.cpu_us_per_call:.1f}"),
    ]
    return render_table(columns, rows)


def _cell(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"
