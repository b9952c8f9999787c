"""`muster events`: workload, queue and configuration events from the gateway's Events.Watch.

Without --follow it prints the events stored so far and exits; with --follow it goes on
printing new ones until interrupted. Every line starts with the event's sequence: pass the last
one + 1 as --from-sequence to resume where a previous run stopped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any

import grpc
from google.protobuf import json_format

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

_ROW = "{seq:>8}  {time:<24}  {type:<30}  {workload:<40}  {details}"


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "events",
        help="print workload events, optionally following new ones",
        description="Print the events stored on the bus (oldest first), filtered; with "
        "--follow, keep printing new ones until interrupted.",
    )
    parser.add_argument("-f", "--follow", action="store_true", help="wait for new events")
    parser.add_argument("--workload", metavar="NS/NAME", default="", help="one workload")
    parser.add_argument("--namespace", metavar="NS", default="", help="one namespace")
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
    if args.from_sequence < 0:
        print("muster: --from-sequence must be >= 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    request = services_pb2.WatchRequest(
        namespace=args.namespace,
        local_queue=args.local_queue,
        workload=args.workload,
        from_sequence=args.from_sequence,
        types=args.types,
        history_only=not args.follow,
    )
    metadata = call_metadata(args)
    if args.output == "table":
        header = _ROW.format(seq="SEQ", time="TIME", type="TYPE", workload="WORKLOAD", details="")
        print(header.rstrip(), flush=True)
    with channel(args) as ch:
        call = services_pb2_grpc.EventsStub(ch).Watch(request, metadata=metadata)
        return _print_events(args, call)


def _print_events(args: argparse.Namespace, call: Any) -> int:
    printed = 0
    try:
        if args.max_events is not None and args.max_events <= 0:
            return EXIT_OK
        for env in call:
            print(_line(env, output=args.output), flush=True)
            printed += 1
            if args.max_events is not None and printed >= args.max_events:
                break
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.CANCELLED:
            return EXIT_OK
        return report_error(args, exc)
    except KeyboardInterrupt:  # the way to stop --follow
        return EXIT_OK
    finally:
        call.cancel()
    return EXIT_OK


def _line(env: events_pb2.Envelope, *, output: str) -> str:
    if output == "json":
        return to_json(env, indent=None)
    when = datetime.datetime.fromtimestamp(env.time_unix_nano / 1e9, tz=datetime.UTC)
    return _ROW.format(
        seq=env.sequence,
        time=when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        type=env.type,
        workload=env.workload or "-",
        details=details(env),
    ).rstrip()


def details(env: events_pb2.Envelope) -> str:
    """A one-line summary of `env`'s payload: what a person scanning the list needs."""
    field = env.WhichOneof("payload")
    if field == "submitted":
        return f"queue={env.submitted.queue_name or 'default'}"
    if field == "config_applied":
        return f"{env.config_applied.kind}/{env.config_applied.name}"
    if field == "config_deleted":
        return f"{env.config_deleted.kind}/{env.config_deleted.name}"
    if field in ("pending", "evicted", "requeued", "gang_rejected"):
        payload = getattr(env, field)
        return f"{payload.reason}: {payload.message}".strip(": ")
    if field in ("admitted", "quota_reserved"):
        admission = getattr(env, field).admission
        flavors = sorted(
            {f"{r}={f}" for ps in admission.pod_set_assignments for r, f in ps.flavors.items()}
        )
        return f"clusterQueue={admission.cluster_queue} {' '.join(flavors)}".rstrip()
    if field == "routed":
        r = env.routed
        where = f"{r.from_cluster_queue} → {r.to_cluster_queue} (LocalQueue {r.queue_name})"
        return f"{where} {r.policy or r.reason}: {r.message}"  # RequestsRefused: no policy
    if field == "finished":
        ok = "succeeded" if env.finished.succeeded else "failed"
        return f"{ok} {env.finished.message}".rstrip()
    if field == "queue_status":
        return f"ClusterQueue/{env.queue_status.cluster_queue.name}"
    if field is None:
        return ""
    compact = json_format.MessageToDict(getattr(env, field))
    return json.dumps(compact, separators=(",", ":")) if compact else ""
