"""`muster`: parse the command line and dispatch to the command group's module.

Each group module (`simulate`, `run`, ...) exposes `add_parser(subparsers)`, which registers
its arguments and sets `handler`: a function from the parsed arguments to an exit status.
`bench` and `service` parse their own command lines, and are handed over before the others are
imported: a service process starts without loading the simulator and the gateway clients.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    return _build_parsers()[0]


def _build_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """`muster`'s parser and each command's, by name."""
    from muster.cli import (
        clusters,
        control,
        describe,
        events,
        health,
        nats_admin,
        queues,
        run,
        simulate,
        submit,
        up,
        workloads,
    )

    parser = argparse.ArgumentParser(
        prog="muster", description="Kueue-compatible batch admission for Kubernetes."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run.add_parser(commands)
    up.add_parsers(commands)  # up, down, status
    health.add_parser(commands)
    simulate.add_parser(commands)
    for client_command in (
        submit,
        queues,
        workloads,
        clusters,
        describe,
        events,
    ):  # gateway clients
        client_command.add_parser(commands)
    control.add_parsers(commands)  # stop, resume, delete
    nats_admin.add_parser(commands)
    # Listed for `muster --help` only: `main` hands `muster bench ...` over before parsing.
    commands.add_parser("bench", help="run the benchmarks (see `muster bench --help`)")
    commands.add_parser("service", help="run one muster service (see `muster service --help`)")
    return parser, dict(commands.choices)


def _unrecognized(command: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """argparse's complaint, with the nearest flag of `command` for a mistyped one."""
    flags = [flag for action in command._actions for flag in action.option_strings]
    guesses = [
        f"{arg} (did you mean {near[0]}?)" if near else arg
        for arg in unknown
        for near in [
            difflib.get_close_matches(arg.split("=")[0], flags, n=1) if arg[:1] == "-" else []
        ]
    ]
    return f"unrecognized arguments: {' '.join(guesses)}"


def run_bench(argv: list[str]) -> int:
    """Hand the rest of the command line to `muster.cli.bench.main`, imported only now."""
    bench = importlib.import_module("muster.cli.bench")
    status: int = bench.main(argv)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `muster` command; returns its exit status (2 for bad input)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        return run_bench(argv[1:])  # bench parses its own options, --help included
    if argv[:1] == ["service"]:
        from muster.cli import service

        return service.main(argv[1:])  # each service parses its own flags
    parser, commands = _build_parsers()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # The command's usage names its flags; `muster`'s ("COMMAND ...") did not say which.
        commands[args.command].error(_unrecognized(commands[args.command], unknown))
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
