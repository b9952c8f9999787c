"""The simulator: replays Kueue YAML scenarios against `muster.core.Engine` on a virtual clock.

`load_scenario` (files) or `build_scenario` (decoded objects) make a `Scenario`; `simulate` runs
it; `run_scenario` does both for objects built in code (the benchmark). `report` renders results.
"""

from muster.sim.runner import (
    Simulation,
    SimulationError,
    SimulationResult,
    WorkloadTiming,
    run_scenario,
    simulate,
)
from muster.sim.scenario import (
    InvalidScenarioError,
    Scenario,
    ScenarioFileError,
    build_scenario,
    load_scenario,
    load_scenario_text,
)

__all__ = [
    "InvalidScenarioError",
    "Scenario",
    "ScenarioFileError",
    "Simulation",
    "SimulationError",
    "SimulationResult",
    "WorkloadTiming",
    "build_scenario",
    "load_scenario",
    "load_scenario_text",
    "run_scenario",
    "simulate",
]
