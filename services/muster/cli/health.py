"""`muster health ADDRESS`: exit 0 when the service at ADDRESS answers SERVING.

A probe for places that run a command rather than speak gRPC health themselves: compose's
`healthcheck` (the image has muster and no grpc_health_probe), a shell script waiting for a
stack. Kubernetes probes the port with its own gRPC probe (deploy/base) and needs none of this.
Exit 0 SERVING, 1 anything else (refused, NOT_SERVING, no answer within `--timeout`), 2 for an
address that is not HOST:PORT.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

SERVING, NOT_SERVING, BAD_INPUT = 0, 1, 2


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    health = commands.add_parser(
        "health",
        help="exit 0 when a muster service's gRPC health says SERVING",
        description="Ask the service's gRPC health endpoint (its --health-port) whether it "
        "serves: exit 0 SERVING, 1 not (or no answer), 2 a malformed address.",
    )
    health.add_argument("address", metavar="HOST:PORT", help="e.g. 127.0.0.1:8081")
    health.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS", help="(default 2)")
    health.set_defaults(handler=handle_health)


def handle_health(args: argparse.Namespace) -> int:
    problem = address_problem(args.address) or (
        "" if 0 < args.timeout <= 3600 else f"--timeout: {args.timeout:g} is not in (0, 3600]"
    )
    if problem:
        print(f"muster health: {problem}", file=sys.stderr)
        return BAD_INPUT
    if serving(args.address, timeout=args.timeout):
        print(f"{args.address}: SERVING")
        return SERVING
    print(f"{args.address}: not serving", file=sys.stderr)
    return NOT_SERVING


def address_problem(address: str) -> str:
    """Why `address` is not HOST:PORT, or ''."""
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        return f"address {address!r} is not HOST:PORT with a port in 1..65535"
    return ""


def serving(address: str, *, timeout: float = 2.0) -> bool:
    """True when the gRPC health service at `address` answers SERVING for the whole server."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
