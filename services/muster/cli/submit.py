"""`muster submit FILE...`: send Jobs, Workloads and configuration to the gateway.

Each file (or `-` for stdin) is one `Gateway.Submit`: all of its objects are accepted, or none
and every problem is printed. The other files are still submitted. A call that fails because
the gateway or the bus is unavailable is retried (3 tries in all) with the same idempotency
key, so the retry publishes nothing twice.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Final

import grpc

from muster.cli.client import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    add_client_options,
    call_metadata,
    channel,
    report_error,
)
from muster.cli.simulate import add_validate_option
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.sim.scenario import not_a_file

_VERB = {"Workload": "submitted"}  # configuration objects are "applied"
TRIES: Final = 3
RETRY_AFTER_S: Final = (0.5, 2.0)  # before the 2nd and the 3rd try
_RETRIED: Final = frozenset({grpc.StatusCode.UNAVAILABLE})


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "submit",
        help="submit Jobs, Workloads and queue configuration to a running gateway",
        description="Send each FILE (YAML or JSON, one or more documents; - for stdin) to the "
        "gateway. A file with any problem changes nothing; every problem is printed.",
    )
    parser.add_argument("files", metavar="FILE", nargs="*", help="manifest file, or - for stdin")
    # kubectl's spelling, which a Kueue user types first.
    parser.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        dest="filenames",
        action="append",
        default=[],
        help="a FILE too, as kubectl names it (repeatable)",
    )
    parser.add_argument(
        "--cluster", metavar="ID", default="", help="cluster id (default: the gateway's)"
    )
    add_validate_option(parser)
    add_client_options(parser)
    parser.set_defaults(handler=handle)


# Far above any gateway's request limit: a device or an endless pipe is refused at this
# instead of filling memory.
MAX_MANIFEST_BYTES = 64 << 20


def _read_manifest(name: str) -> str | None:
    """The file (or stdin, "-") as text; None when it is longer than MAX_MANIFEST_BYTES."""
    if name == "-" and not hasattr(sys.stdin, "buffer"):  # a text stream put in its place
        text = sys.stdin.read(MAX_MANIFEST_BYTES + 1)
        return text if len(text) <= MAX_MANIFEST_BYTES else None
    if name == "-":
        data = sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1)
    else:
        with open(name, "rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        return None
    return data.decode("utf-8")


def handle(args: argparse.Namespace) -> int:
    files = [*args.filenames, *args.files]
    if not files:
        print("muster submit: name a manifest: FILE, -f FILE, or - for stdin", file=sys.stderr)
        return EXIT_BAD_INPUT
    status = EXIT_OK
    with channel(args) as ch:
        gateway = services_pb2_grpc.GatewayStub(ch)
        for name in files:
            status = max(status, _submit_file(args, gateway, name))
    return status


def _submit_file(args: argparse.Namespace, gateway: Any, name: str) -> int:
    try:
        manifest = _read_manifest(name)
    except (OSError, UnicodeDecodeError) as exc:
        # As `muster simulate` says it ("no such file"), not "[Errno 2] No such file or ...".
        if isinstance(exc, OSError) and not Path(name).is_file():
            reason = not_a_file(Path(name))
        else:
            reason = f"cannot read: {exc.strerror if isinstance(exc, OSError) else exc}"
        print(f"muster: {name}: {reason}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if manifest is None:
        print(
            f"muster: {name}: more than {MAX_MANIFEST_BYTES >> 20} MiB: not a manifest a gateway"
            " takes (4 MiB by default, the gateway's --max-request-bytes)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    request = services_pb2.SubmitRequest(
        manifest=manifest,
        cluster=args.cluster,
        idempotency_key=uuid.uuid4().hex,  # one per file, the same on every retry
        validation=args.validate,
    )
    for attempt in range(TRIES):
        try:
            reply = gateway.Submit(request, metadata=call_metadata(args), timeout=args.timeout)
            break
        except grpc.RpcError as exc:
            if exc.code() not in _RETRIED or attempt == TRIES - 1:
                return report_error(args, exc, prefix=f"{name}: ")
            time.sleep(RETRY_AFTER_S[attempt])
    for warning in reply.warnings:
        print(f"Warning: {name}: {warning}", file=sys.stderr)
    for obj in reply.objects:
        if obj.outcome:  # written into the API server (on Kubernetes), or "exists": left as is
            print(f"{obj.kind} {obj.key} {obj.outcome}")
            continue
        verb = _VERB.get(obj.kind, "applied")
        print(f"{obj.kind} {obj.key} {verb} (event {obj.event_id})")
    return EXIT_OK
