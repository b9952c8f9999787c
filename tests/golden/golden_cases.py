"""Golden replays: fixed inputs whose every decision is recorded in `<case>.jsonl`.

A replay must reproduce the recorded events exactly (time, type, object, reason, message, by).
Regenerate with `make golden` and review the diff like code: it shows every decision that moved.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec

from muster.bench.kueue_perf import BASELINE, generate
from muster.sim.demo import DEMO_YAML, SOURCE
from muster.sim.report import event_entry
from muster.sim.runner import SimulationResult, run_scenario, simulate
from muster.sim.scenario import load_scenario_text

HERE = Path(__file__).parent


def _demo() -> SimulationResult:
    return simulate(load_scenario_text(DEMO_YAML, source=SOURCE))


def _kueue_baseline() -> SimulationResult:
    return run_scenario(generate(BASELINE, scale=0.02).objects, config=None, until_s=None)


CASES: dict[str, Callable[[], SimulationResult]] = {
    "demo": _demo,
    "kueue-baseline-2pct": _kueue_baseline,
}


def replay(case: str) -> list[str]:
    """The case's events as JSON lines, in order."""
    return [msgspec.json.encode(event_entry(e)).decode() for e in CASES[case]().events]


def recorded(case: str) -> list[str]:
    return (HERE / f"{case}.jsonl").read_text().splitlines()
