"""The admission section: Kueue's scalability configurations through the simulator, one row each.

Wall time is `time.perf_counter()` around `run_scenario` only: generating the objects and
computing the metrics are not part of it. Everything else in a row is virtual and
deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import msgspec

from muster.bench.kueue_perf import PerfConfig, generate
from muster.bench.metrics import ClassWaits, measure
from muster.bench.table import Column, number, render_table
from muster.sim import run_scenario

SECTION = "admission"


class AdmissionRow(msgspec.Struct, frozen=True, kw_only=True):
    """One configuration's result; `-o json` prints exactly these fields."""

    section: str = SECTION
    config: str
    scale: float
    workloads: int
    cluster_queues: int
    cohorts: int
    admissions: int
    wall_s: float
    decisions_per_s: float
    waits: Mapping[str, ClassWaits]  # class -> time to first QuotaReserved, virtual seconds
    mean_usage_pct: float | None  # of nominal, while work waits (see muster.bench.metrics)
    max_usage_pct: float  # the fullest any cohort got; at most 100 within the quota tree
    preemptions: int
    finished: int
    makespan_s: float  # virtual


def run_config(config: PerfConfig, *, scale: float) -> AdmissionRow:
    """Generate `config` at `scale`, simulate it once, and measure the run."""
    plan = generate(config, scale=scale)
    started = time.perf_counter()
    result = run_scenario(plan.objects, config=None, until_s=None)
    wall_s = time.perf_counter() - started
    metrics = measure(result.events, plan.workloads, cohort_nominal_milli=plan.cohort_nominal_milli)
    mean_usage = metrics.mean_usage_while_waiting
    return AdmissionRow(
        config=config.name,
        scale=scale,
        workloads=len(plan.workloads),
        cluster_queues=plan.cluster_queues,
        cohorts=len(plan.cohort_nominal_milli),
        admissions=metrics.admissions,
        wall_s=round(wall_s, 4),
        decisions_per_s=round(metrics.admissions / wall_s, 1) if wall_s > 0 else 0.0,
        waits={name: rounded(waits) for name, waits in metrics.waits.items()},
        mean_usage_pct=None if mean_usage is None else round(100 * mean_usage, 2),
        max_usage_pct=round(100 * metrics.max_usage, 2),
        preemptions=metrics.preemptions,
        finished=metrics.finished,
        makespan_s=round(metrics.makespan_s, 6),
    )


def rounded(waits: ClassWaits) -> ClassWaits:
    """Waits to the microsecond, so sums like 0.30000000000000004 print as 0.3."""

    def r(value: float | None) -> float | None:
        return None if value is None else round(value, 6)

    return msgspec.structs.replace(
        waits,
        mean_s=r(waits.mean_s),
        p50_s=r(waits.p50_s),
        p99_s=r(waits.p99_s),
        max_s=r(waits.max_s),
    )


# --- the table -------------------------------------------------------------------------------

TARGET_DECISIONS_PER_S = 5000.0  # the 1 000-ClusterQueue configurations, on one core
TARGET_CONFIGS = ("large-scale", "hierarchical-fair")
TARGET_USAGE_PCT = 90.0  # every configuration


def columns(rows: list[AdmissionRow]) -> list[Column[AdmissionRow]]:
    """The table's columns; one wait column per class that any row has."""
    classes = list(dict.fromkeys(name for row in rows for name in row.waits))
    return [
        Column("CONFIG", lambda row: row.config, numeric=False),
        Column("WORKLOADS", lambda row: str(row.workloads)),
        Column("CLUSTERQUEUES", lambda row: str(row.cluster_queues)),
        Column("ADMISSIONS", lambda row: str(row.admissions)),
        Column("WALL(s)", lambda row: number(row.wall_s, digits=2)),
        Column("DECISIONS/s", lambda row: number(row.decisions_per_s, digits=0)),
        *(wait_column(name) for name in classes),
        Column("MEAN-USAGE%", lambda row: number(row.mean_usage_pct, digits=1)),
        Column("MAX-USAGE%", lambda row: number(row.max_usage_pct, digits=1)),
        Column("PREEMPTIONS", lambda row: str(row.preemptions)),
    ]


def wait_column(name: str) -> Column[AdmissionRow]:
    def cell(row: AdmissionRow) -> str:
        waits = row.waits.get(name)
        return number(None if waits is None else waits.mean_s)

    return Column(f"WAIT-{name.upper()}(s)", cell)


def render(rows: list[AdmissionRow]) -> str:
    """The table, then one line per row and target saying whether the row meets it."""
    notes = [usage_note(row) for row in rows]
    notes += [rate_note(row) for row in rows if row.config in TARGET_CONFIGS]
    if any(row.scale != 1.0 for row in rows):
        notes.append("(counts scaled with --scale; the targets are for scale 1)")
    return render_table(columns(rows), rows) + "\n" + "".join(f"{note}\n" for note in notes)


def usage_note(row: AdmissionRow) -> str:
    target = f"mean usage while work waits >= {TARGET_USAGE_PCT:g} %"
    if row.mean_usage_pct is None:
        return f"{row.config}: {target}: met (no work ever waited)"
    met = "met" if row.mean_usage_pct >= TARGET_USAGE_PCT else "MISSED"
    return f"{row.config}: {target}: {met} ({number(row.mean_usage_pct, digits=1)} %)"


def rate_note(row: AdmissionRow) -> str:
    met = "met" if row.decisions_per_s >= TARGET_DECISIONS_PER_S else "MISSED"
    rate = number(row.decisions_per_s, digits=0)
    return f"{row.config}: >= {TARGET_DECISIONS_PER_S:g} decisions/s: {met} ({rate})"
