"""`muster submit FILE...`: send Jobs, Workloads and configuration to the gateway.

Each file (or `-` for stdin) is one `Gateway.Submit`: all of its objects are accepted, or none
and every problem is printed. The other files are still submitted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import grpc

from muster.cli.client import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    add_client_options,
    call_metadata,
    channel,
    report_error,
)
from muster.contracts.v1 import services_pb2, services_pb2_grpc

_VERB = {"Workload": "submitted"}  # configuration objects are "applied"


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "submit",
        help="submit Jobs, Workloads and queue configuration to a running gateway",
        description="Send each FILE (YAML or JSON, one or more documents; - for stdin) to the "
        "gateway. A file with any problem changes nothing; every problem is printed.",
    )
    parser.add_argument("files", metavar="FILE", nargs="+", help="manifest file, or - for stdin")
    parser.add_argument(
        "--cluster", metavar="ID", default="", help="cluster id (default: the gateway's)"
    )
    add_client_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    status = EXIT_OK
    with channel(args) as ch:
        gateway = services_pb2_grpc.GatewayStub(ch)
        for name in args.files:
            status = max(status, _submit_file(args, gateway, name))
    return status


def _submit_file(args: argparse.Namespace, gateway: Any, name: str) -> int:
    try:
        manifest = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"muster: {name}: cannot read: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    request = services_pb2.SubmitRequest(manifest=manifest, cluster=args.cluster)
    try:
        reply = gateway.Submit(request, metadata=call_metadata(args), timeout=args.timeout)
    except grpc.RpcError as exc:
        return report_error(args, exc, prefix=f"{name}: ")
    for obj in reply.objects:
        verb = _VERB.get(obj.kind, "applied")
        print(f"{obj.kind} {obj.key} {verb} (event {obj.event_id})")
    return EXIT_OK
