"""`muster simulate FILE...`: replay Kueue YAML on the virtual clock and report what happened.

Exit status: 0 after a run; 2 for input that cannot run (each problem on stderr as
"object: field path: problem", nothing on stdout); 1 when the simulation itself fails.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from muster.api import VALIDATIONS, FieldError, Validation
from muster.core.routing import POLICIES, Policy, RoutingSettings
from muster.sim import (
    InvalidScenarioError,
    ScenarioFileError,
    SimulationError,
    SimulationResult,
    load_scenario,
    simulate,
)
from muster.sim.report import render_json, render_table, render_yaml

RENDERERS = {"table": render_table, "json": render_json, "yaml": render_yaml}
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


# What the workload table's time columns count, for `--help` (muster run prints the same).
TABLE_COLUMNS = (
    "In the workload table, WAITED is the seconds a workload was queued, summed over every "
    "wait (one evicted and requeued waits again; up to the end for one still queued), and RAN "
    "the seconds it ran, summed over every admission."
)


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "simulate",
        help="replay scenario YAML on a virtual clock",
        description="Replay Kueue YAML (plus muster.dev/* annotations) on a virtual clock "
        "and report admissions, waits and quota usage; with Nodes in the scenario, also where "
        "pods and gangs are placed. See docs/simulate-json.md.",
        epilog=TABLE_COLUMNS,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="multi-document YAML files")
    add_run_options(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=sorted(RENDERERS),
        default="table",
        help="table for people (default); json or yaml for programs",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="Kueue Configuration; wins over one in the scenario"
    )
    add_validate_option(parser)
    parser.add_argument(
        "--routing-policy",
        choices=POLICIES,
        default=Policy.STATIC.value,
        help="how workloads with muster.dev/alternatives are routed where their declared "
        "ClusterQueue names no muster.dev/routing-policy (default: static; docs/routing.md)",
    )
    parser.set_defaults(handler=handle)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared with `muster run`."""
    parser.add_argument(
        "--until",
        type=seconds_argument,
        metavar="SECONDS",
        help="stop the virtual clock here; later events are not simulated (without it, the "
        "run ends when nothing more can happen, or when it only repeats itself)",
    )


def add_validate_option(parser: argparse.ArgumentParser) -> None:
    """kubectl's --validate, shared with `muster submit`."""
    parser.add_argument(
        "--validate",
        choices=VALIDATIONS,
        default="strict",
        help="unknown fields and keys written twice: refuse them (strict, the default, as "
        "kubectl), print a warning (warn) or drop them (ignore)",
    )


def seconds_argument(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0: {text!r}")
    return value


def handle(args: argparse.Namespace) -> int:
    routing = RoutingSettings(default_policy=Policy(args.routing_policy))
    result = run_files(
        args.files,
        config_path=args.config,
        until_s=args.until,
        routing=routing,
        validation=args.validate,
    )
    if isinstance(result, int):
        return result
    note_repeats(result)
    sys.stdout.write(RENDERERS[args.output](result))
    return EXIT_OK


def note_repeats(result: SimulationResult) -> None:
    """Say on stderr why a run without `--until` ended early, when it ended on a repeat."""
    if result.repeats_from_s is not None:
        print(
            f"muster: the simulation ends at t={result.end_s:g}: from there it would repeat what "
            f"it did from t={result.repeats_from_s:g} for ever (nothing ahead but gang "
            "timeouts); --until simulates further",
            file=sys.stderr,
        )


def run_files(
    files: list[str],
    *,
    config_path: str | None,
    until_s: float | None,
    routing: RoutingSettings | None = None,
    validation: Validation = "strict",
) -> SimulationResult | int:
    """Load and simulate; on failure print the problems to stderr and return the exit status."""
    warnings: list[FieldError] = []
    try:
        scenario = load_scenario(
            files, config_path=config_path, validation=validation, warnings=warnings
        )
    except ScenarioFileError as exc:
        print(f"muster: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InvalidScenarioError as exc:
        _print_warnings(warnings)
        for error in exc.errors:
            print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    _print_warnings(warnings)
    if scenario.cluster_arrivals and not scenario.placement:
        print(
            "muster: no Node in the scenario: Pods and gang objects are not simulated (quota only)",
            file=sys.stderr,
        )
    try:
        return simulate(scenario, until_s=until_s, routing=routing)
    except SimulationError as exc:
        print(f"muster: simulation failed: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _print_warnings(warnings: list[FieldError]) -> None:
    for warning in warnings:
        print(f"Warning: {warning}", file=sys.stderr)
