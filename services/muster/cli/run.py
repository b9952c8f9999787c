"""`muster run`: the embedded default. Starts a loopback NATS server (or uses `--nats URL`), every
service as its own process on the simulated cluster, replays the built-in demo (or
`--scenario FILE`) through the gateway with live progress, then prints every workload and the
queue usage, and stops everything it started, also on Ctrl-C.

`--virtual` replays the same scenario on the virtual clock instead (no processes, instant).
`--routing-policy` is admission's (or the simulator's) default routing policy (docs/routing.md).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from muster.api.decode import read_bounded
from muster.bus.permissions import MAX_ADMISSION_SHARDS
from muster.bus.subjects import check_cluster
from muster.cli.simulate import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    TABLE_COLUMNS,
    add_run_options,
    note_repeats,
    run_files,
)
from muster.core.routing import POLICIES, Policy, RoutingSettings
from muster.sim import InvalidScenarioError, SimulationError, load_scenario_text, simulate
from muster.sim.demo import ABOUT, DEMO_YAML, SOURCE
from muster.sim.report import render_table

DEFAULT_SPEED = 10.0


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "run",
        help="start NATS and every service, replay the demo (or --scenario FILE) and report",
        description="Start a loopback NATS server with JetStream and every muster service as its "
        "own process on a simulated cluster, replay the built-in demo of two teams sharing GPU "
        "and CPU quota (or your --scenario) through the gateway, show progress, and print what "
        "happened. Everything started is stopped at the end or on Ctrl-C.",
        epilog=TABLE_COLUMNS,
    )
    parser.add_argument(
        "--scenario", metavar="FILE", action="append", help="your own scenario YAML instead"
    )
    parser.add_argument(
        "--nats", metavar="URL", help="use this NATS server instead of starting one"
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=DEFAULT_SPEED,
        help=f"scenario seconds per real second (default {DEFAULT_SPEED:g})",
    )
    parser.add_argument("--shards", type=int, default=1, help="admission replicas (default 1)")
    parser.add_argument("--cluster", default="local", help="cluster id (default local)")
    parser.add_argument(
        "--clusters",
        metavar="IDS",
        default="",
        help="worker cluster ids, comma-separated, each with its own per-cluster services "
        "(MultiKueue; a scenario's MultiKueueClusters are added)",
    )
    parser.add_argument(
        "--virtual", action="store_true", help="replay on the virtual clock, without services"
    )
    parser.add_argument(
        "--routing-policy",
        choices=POLICIES,
        default=Policy.STATIC.value,
        help="how workloads with muster.dev/alternatives are routed where their declared "
        "ClusterQueue names no muster.dev/routing-policy (default: static; docs/routing.md)",
    )
    add_run_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    problem = _flag_problem(args)
    if problem:
        print(f"muster run: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.virtual:
        return run_virtual(args)
    texts = _scenario_texts(args.scenario)
    if isinstance(texts, int):
        return texts
    from muster.cli.queues import render_queue_status  # gRPC and NATS: load only when live
    from muster.launcher.run import LaunchError, run_live

    try:
        return asyncio.run(
            run_live(
                texts,
                about=", ".join(args.scenario) if args.scenario else ABOUT,
                nats_url=args.nats,
                speed=args.speed,
                shards=args.shards,
                cluster=args.cluster,
                clusters=[c for c in args.clusters.split(",") if c],
                routing_policy=args.routing_policy,
                until_s=args.until,
                log_dir=Path(tempfile.mkdtemp(prefix="muster-run-")),
                render_queues=render_queue_status,
            )
        )
    except LaunchError as exc:
        print(f"muster run: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        # A terminal echoed "^C" without a newline; anywhere else the newline was a blank line.
        start = "\n" if sys.stderr.isatty() else ""
        print(f"{start}muster run: interrupted; everything it started is stopped", file=sys.stderr)
        return 130


def _flag_problem(args: argparse.Namespace) -> str:
    """What is wrong with the flags ("" when nothing): before anything starts, instead of a
    service that fails to start (`--speed nan`) or a traceback (`--shards 99`, `--cluster a.b`)."""
    if not (math.isfinite(args.speed) and args.speed > 0):
        return f"--speed must be a finite number > 0, got {args.speed:g}"
    if not 1 <= args.shards <= MAX_ADMISSION_SHARDS:
        return f"--shards must be 1 to {MAX_ADMISSION_SHARDS}, got {args.shards}"
    for flag, cluster in [("--cluster", args.cluster)] + [
        ("--clusters", c) for c in args.clusters.split(",") if c
    ]:
        try:
            check_cluster(cluster)
        except ValueError as exc:
            return f"{flag}: {exc}"
    return ""


def _scenario_texts(paths: Sequence[str] | None) -> str | int:
    if not paths:
        return DEMO_YAML
    texts = []
    for path in paths:
        try:  # bounded as `muster simulate` reads them: /dev/zero was read until memory ran out
            texts.append(read_bounded(Path(path)))
        except (OSError, ValueError) as exc:  # UnicodeDecodeError too: a binary file
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            print(f"muster run: --scenario {path}: {reason}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return "---\n".join(texts)


def run_virtual(args: argparse.Namespace) -> int:
    until = "" if args.until is None else f", until t={args.until:g}s"
    routing = RoutingSettings(default_policy=Policy(args.routing_policy))
    if args.scenario:
        result = run_files(args.scenario, config_path=None, until_s=args.until, routing=routing)
        about = ", ".join(args.scenario)
    else:
        result = run_demo(until_s=args.until, routing=routing)
        about = ABOUT
    if isinstance(result, int):
        return result
    note_repeats(result)  # as `muster simulate` says it
    print(f"Simulating {about} (virtual clock, quota only{until}).\n")
    sys.stdout.write(render_table(result))
    return EXIT_OK


def run_demo(*, until_s: float | None, routing: RoutingSettings | None = None) -> Any:
    try:
        scenario = load_scenario_text(DEMO_YAML, source=SOURCE)
        return simulate(scenario, until_s=until_s, routing=routing)
    except InvalidScenarioError as exc:  # a bug in the demo, not the user's input
        for error in exc.errors:
            print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    except SimulationError as exc:
        print(f"muster: simulation failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
