"""`muster service gateway` (or `python -m muster.gateway`): flags → GatewayConfig → run.

The common service flags (`--nats`, `--cluster`, `--health-port`, ...) plus `--listen`,
`--token` and `--max-request-bytes`, each with its MUSTER_GATEWAY_* environment variable.
"""

from __future__ import annotations

import argparse
import os
import sys

from muster.bus.connection import Bus
from muster.bus.redact import register
from muster.bus.service import Health, add_common_flags, config_from_args, run_service
from muster.gateway.service import (
    DEFAULT_LISTEN,
    DEFAULT_MAX_REQUEST_BYTES,
    GatewayConfig,
    run_gateway,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster service gateway",
        description="The gRPC API: Submit manifests, read queue status and pending workloads, "
        "watch events.",
    )
    add_common_flags(parser)
    group = parser.add_argument_group("gateway options")
    group.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=os.environ.get("MUSTER_GATEWAY_LISTEN") or DEFAULT_LISTEN,
        help="where to serve gRPC; port 0 picks a free one, printed as "
        '"gateway: HOST:PORT" (MUSTER_GATEWAY_LISTEN, default %(default)s)',
    )
    group.add_argument(
        "--token",
        default=os.environ.get("MUSTER_GATEWAY_TOKEN") or None,
        help="require metadata `authorization: Bearer TOKEN` on every call but health "
        "(MUSTER_GATEWAY_TOKEN)",
    )
    group.add_argument(
        "--max-request-bytes",
        metavar="N",
        type=int,
        default=os.environ.get("MUSTER_GATEWAY_MAX_REQUEST_BYTES")
        or str(DEFAULT_MAX_REQUEST_BYTES),
        help="largest request accepted; larger ones fail with RESOURCE_EXHAUSTED "
        "(MUSTER_GATEWAY_MAX_REQUEST_BYTES, default 4 MiB)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the gateway until SIGTERM; returns the exit status (2 for bad flags)."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        service = config_from_args(args, "gateway")
        config = GatewayConfig(
            listen=args.listen,
            token=args.token,
            max_request_bytes=args.max_request_bytes,
            cluster=service.cluster,
            max_event_bytes=service.bus.max_event_bytes,
            grace_s=service.grace_s,
        )
    except ValueError as exc:
        parser.error(str(exc))  # exits 2

    register(args.token)  # never in a log line (muster.bus.redact)

    async def body(bus: Bus, health: Health) -> None:
        await run_gateway(bus, health, config)

    return run_service(service, body)


if __name__ == "__main__":
    sys.exit(main())
