"""What every gateway client command shares: --gateway/--token/--timeout, the channel, errors.

Used by `muster submit`, `queues`, `workloads` and `events`. The commands are synchronous gRPC
clients; the server side is `muster.gateway`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Final

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_GATEWAY: Final = "127.0.0.1:50051"
_BAD_INPUT_CODES: Final = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """Add --gateway, --token and --timeout (defaults from MUSTER_GATEWAY, _TOKEN)."""
    group = parser.add_argument_group("gateway connection")
    group.add_argument(
        "--gateway",
        metavar="HOST:PORT",
        default=os.environ.get("MUSTER_GATEWAY") or DEFAULT_GATEWAY,
        help="the gateway's address (MUSTER_GATEWAY, default %(default)s)",
    )
    group.add_argument(
        "--token",
        default=os.environ.get("MUSTER_GATEWAY_TOKEN") or None,
        help="bearer token, when the gateway requires one (MUSTER_GATEWAY_TOKEN)",
    )
    group.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=30.0,
        help="give up on a call after this long (default %(default)gs; not for --follow)",
    )


def add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="output format (default %(default)s)",
    )


def call_metadata(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The metadata every call carries: the bearer token when one is given."""
    return [("authorization", f"Bearer {args.token}")] if args.token else []


@contextlib.contextmanager
def channel(args: argparse.Namespace) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(args.gateway) as ch:
        yield ch


def report_error(args: argparse.Namespace, exc: grpc.RpcError, *, prefix: str = "") -> int:
    """Print a failed call's status to stderr, one line per line of detail; the exit status."""
    code: grpc.StatusCode = exc.code()
    details: str = exc.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE and not details.startswith("the gateway"):
        details = f"cannot reach the gateway at {args.gateway}: {details}"
    lines = details.splitlines() or [""]
    if len(lines) == 1:
        print(f"muster: {prefix}{code.name}: {lines[0]}", file=sys.stderr)
    else:
        print(f"muster: {prefix}{code.name}:", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
    return EXIT_BAD_INPUT if code in _BAD_INPUT_CODES else EXIT_FAILED


def to_json(message: Message, *, indent: int | None = 2) -> str:
    """`message` as JSON with proto field names (camelCase) and zero values included."""
    return json_format.MessageToJson(
        message, always_print_fields_with_no_presence=True, indent=indent, sort_keys=False
    )


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows under a header, columns padded to their widest cell, two spaces apart."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in (header, *rows)
    ]
    return "\n".join(lines) + "\n"
