"""`muster run`: the embedded default. For now: the built-in demo on the simulator.

The services and the loopback NATS server join in a later issue; until then `run` replays the
demo (or `--scenario FILE`) through the same simulator as `muster simulate` and prints the table.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from muster.cli.simulate import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, add_run_options, run_files
from muster.sim import InvalidScenarioError, SimulationError, load_scenario_text, simulate
from muster.sim.demo import ABOUT, DEMO_YAML, SOURCE
from muster.sim.report import render_table


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "run",
        help="run the built-in demo (or --scenario FILE) and print what happened",
        description="Replay the built-in demo of two teams sharing GPU and CPU quota on the "
        "virtual clock (quota only, no nodes yet) and print one row per workload.",
    )
    parser.add_argument(
        "--scenario", metavar="FILE", action="append", help="your own scenario YAML instead"
    )
    add_run_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    until = "" if args.until is None else f", until t={args.until:g}s"
    if args.scenario:
        result = run_files(args.scenario, config_path=None, until_s=args.until)
        about = ", ".join(args.scenario)
    else:
        result = run_demo(until_s=args.until)
        about = ABOUT
    if isinstance(result, int):
        return result
    print(f"Simulating {about} (virtual clock, quota only, no nodes{until}).\n")
    sys.stdout.write(render_table(result))
    return EXIT_OK


def run_demo(*, until_s: float | None) -> Any:
    try:
        return simulate(load_scenario_text(DEMO_YAML, source=SOURCE), until_s=until_s)
    except InvalidScenarioError as exc:  # a bug in the demo, not the user's input
        for error in exc.errors:
            print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    except SimulationError as exc:
        print(f"muster: simulation failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
