"""`muster events`: workload, queue and configuration events from the gateway's Events.Watch.

Without --follow it prints the events stored so far and exits; with --follow it goes on
printing new ones until interrupted. Every line starts with the event's sequence: pass the last
one + 1 as --from-sequence to resume where a previous run stopped.

`--workload` takes any name a user would type: a workload's key (`ns/name`), its name or its
Job's name (in `--namespace`, or `ns/` given), a gang's source (`team-a/allreduce` follows the
gang `team-a/allreduce/workers`): the gateway's ListWorkloads says which workloads it names.
The detail column is one readable line per event (`muster.gateway.eventtext`); in a table,
alike events of a workload that follow each other are folded into one line (`x12`).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import grpc

from muster.cli.client import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    add_client_options,
    add_output_option,
    call_metadata,
    channel,
    report_error,
    to_json,
)
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.gateway.eventtext import detail, line_of, same_line

MAX_SEQUENCE = 2**64 - 1  # WatchRequest.from_sequence is a uint64
_ROW = "{seq:>8}  {time:<24}  {type:<30}  {workload:<40}  {details}"


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "events",
        help="print workload events, optionally following new ones",
        description="Print the events stored on the bus (oldest first), filtered; with "
        "--follow, keep printing new ones until interrupted.",
    )
    parser.add_argument("-f", "--follow", action="store_true", help="wait for new events")
    parser.add_argument(
        "--workload",
        metavar="NAME",
        default="",
        help="one workload: ns/name, or its name, its Job's or its gang's (with --namespace)",
    )
    parser.add_argument("-n", "--namespace", metavar="NS", default="", help="one namespace")
    parser.add_argument(
        "--local-queue",
        metavar="LQ",
        default="",
        help="workloads submitted to this LocalQueue, and those routed to it (from the route)",
    )
    parser.add_argument(
        "--type",
        dest="types",
        metavar="TYPE",
        action="append",
        default=[],
        help="only this event type, e.g. workload.admitted (repeatable)",
    )
    parser.add_argument(
        "--from-sequence",
        metavar="N",
        type=int,
        default=1,
        help="start at stream sequence N (default 1: all stored; 0: only new ones)",
    )
    parser.add_argument(
        "--max-events", metavar="N", type=int, default=None, help="stop after N events"
    )
    add_output_option(parser)
    add_client_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if not 0 <= args.from_sequence <= MAX_SEQUENCE:  # a bigger one was a ValueError traceback
        print(f"muster: --from-sequence must be 0 to {MAX_SEQUENCE}", file=sys.stderr)
        return EXIT_BAD_INPUT
    metadata = call_metadata(args)
    with channel(args) as ch:
        try:
            namespace, keys = _resolve(args, ch, metadata)
        except grpc.RpcError as exc:
            return report_error(args, exc)
        request = services_pb2.WatchRequest(
            namespace=namespace,
            local_queue=args.local_queue,
            workload=next(iter(keys)) if len(keys) == 1 else "",
            from_sequence=args.from_sequence,
            types=args.types,
            history_only=not args.follow,
        )
        call = services_pb2_grpc.EventsStub(ch).Watch(request, metadata=metadata)
        return _print_events(args, call, keys)


def _resolve(
    args: argparse.Namespace, ch: grpc.Channel, metadata: list[tuple[str, str]]
) -> tuple[str, frozenset[str]]:
    """(namespace to watch, the workload keys `--workload` names; empty: no such filter)."""
    name, namespace = args.workload, args.namespace
    if not name:
        return namespace, frozenset()
    if "/" in name:
        namespace, _, name = name.partition("/")
    found = services_pb2_grpc.VisibilityStub(ch).ListWorkloads(
        services_pb2.ListWorkloadsRequest(namespace=namespace, name=name),
        metadata=metadata,
        timeout=args.timeout,
    )
    keys = frozenset(w.key for w in found.items)
    # Nothing by that name yet: the key as typed (a workload still to be submitted).
    return namespace, keys or frozenset({f"{namespace or 'default'}/{name}"})


def _print_events(args: argparse.Namespace, call: Any, keys: frozenset[str]) -> int:
    wanted: Iterator[events_pb2.Envelope] = (
        env for env in call if not keys or env.workload in keys
    )
    if args.max_events is not None:
        wanted = _first(wanted, args.max_events)
    try:
        if args.output == "json":
            for env in wanted:
                print(to_json(env, indent=None), flush=True)
        else:
            # The header comes with the first line (or a clean end), so a gateway that cannot
            # be reached gets one line of error and no table.
            header = _ROW.format(
                seq="SEQ", time="TIME", type="TYPE", workload="WORKLOAD", details=""
            ).rstrip()
            for line in folded_lines(wanted):
                if header:
                    print(header, flush=True)
                    header = ""
                print(line, flush=True)
            if header:
                print(header, flush=True)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.CANCELLED:
            return EXIT_OK
        return report_error(args, exc)
    except KeyboardInterrupt:  # the way to stop --follow
        return EXIT_OK
    finally:
        call.cancel()
    return EXIT_OK


def _first(envs: Iterable[events_pb2.Envelope], n: int) -> Iterator[events_pb2.Envelope]:
    if n <= 0:
        return
    for i, env in enumerate(envs, start=1):
        yield env
        if i >= n:
            return


def folded_lines(envs: Iterable[events_pb2.Envelope]) -> Iterator[str]:
    """Table lines of `envs`; an event alike the one before it (same workload, same type and
    detail, or a pending-pods count) is not printed, and the run's last line says `xN`.

    A run is printed when it starts, so a follower sees each new kind of event at once; its
    count follows when the run ends (or the stream does).
    """
    run: events_pb2.Envelope | None = None  # the first of the run, as printed
    last = events_pb2.Envelope()
    count = 0
    for env in envs:
        if (
            run is not None
            and run.workload == env.workload
            and same_line(line_of(run), line_of(env))
        ):
            count, last = count + 1, env
            continue
        if count > 1:
            yield _repeat_line(last, count)
        yield _row(env)
        run, last, count = env, env, 1
    if count > 1:
        yield _repeat_line(last, count)


def _repeat_line(env: events_pb2.Envelope, count: int) -> str:
    return _row(env, suffix=f" (x{count} in all)")


def _row(env: events_pb2.Envelope, *, suffix: str = "") -> str:
    when = datetime.datetime.fromtimestamp(env.time_unix_nano / 1e9, tz=datetime.UTC)
    return _ROW.format(
        seq=env.sequence,
        time=when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        type=env.type,
        workload=env.workload or "-",
        details=detail(env) + suffix,
    ).rstrip()


def details(env: events_pb2.Envelope) -> str:
    """A one-line summary of `env`'s payload (`muster.gateway.eventtext.detail`)."""
    return detail(env)
