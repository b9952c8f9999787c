"""`muster service dashboard`: flags → the dashboard's web server (`server.serve`).

A gateway client: `--gateway HOST:PORT` (MUSTER_GATEWAY) and, for a TLS gateway,
`--tls-ca FILE` (MUSTER_CLIENT_TLS_CA). It listens on loopback unless `--listen` names
another address: it adds no authentication of its own, the gateway judges every call with
the token the browser sends. On loopback it answers only requests addressed to a loopback
name (`server._loopback_only`: no DNS rebinding).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import grpc

from muster.bus.service import file_flag, run_loop
from muster.dashboard.server import serve
from muster.gateway.config import split_listen

DEFAULT_LISTEN = "127.0.0.1:8080"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster service dashboard",
        description="Serve the web dashboard: queues, quota bars, pending workloads, a timeline "
        "of admissions and evictions, workloads, nodes and clusters, live.",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=os.environ.get("MUSTER_DASHBOARD_LISTEN") or DEFAULT_LISTEN,
        help=f"where to serve HTTP (MUSTER_DASHBOARD_LISTEN, default {DEFAULT_LISTEN}; "
        "port 0 picks a free one)",
    )
    parser.add_argument(
        "--gateway",
        metavar="HOST:PORT",
        default=os.environ.get("MUSTER_GATEWAY") or "127.0.0.1:50051",
        help="the gateway (MUSTER_GATEWAY, default 127.0.0.1:50051)",
    )
    parser.add_argument(
        "--tls-ca",
        metavar="FILE",
        type=file_flag,
        default=os.environ.get("MUSTER_CLIENT_TLS_CA"),
        help="verify a TLS gateway with this CA (MUSTER_CLIENT_TLS_CA)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        host, port = split_listen(args.listen)
    except ValueError as exc:
        parser.error(str(exc))
    credentials = None
    if args.tls_ca:
        try:
            credentials = grpc.ssl_channel_credentials(Path(args.tls_ca).read_bytes())
        except OSError as exc:
            parser.error(f"--tls-ca {args.tls_ca}: {exc.strerror or exc}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    try:
        run_loop(serve(host=host, port=port, gateway=args.gateway, credentials=credentials))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"muster service dashboard: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
