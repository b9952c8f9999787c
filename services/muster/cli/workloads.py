"""`muster workloads`: the workloads pending in a ClusterQueue or LocalQueue, with positions.

Reads the gateway's Visibility.PendingWorkloads, one page at a time (`--offset`, `--limit`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import grpc

from muster.cli.client import (
    EXIT_OK,
    add_client_options,
    add_output_option,
    call_metadata,
    channel,
    render_table,
    report_error,
    to_json,
)
from muster.contracts.v1 import services_pb2, services_pb2_grpc


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "workloads",
        help="list the workloads pending in a queue, in admission order",
        description="List the workloads pending in a ClusterQueue or a LocalQueue, in the "
        "order admission will consider them, with their positions.",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--cluster-queue", metavar="CQ", help="a ClusterQueue")
    which.add_argument(
        "--local-queue", metavar="NS/LQ", help='a LocalQueue (namespace "default" if no NS/)'
    )
    parser.add_argument("--offset", type=int, default=0, help="skip this many (default 0)")
    parser.add_argument(
        "--limit", type=int, default=100, help="show at most this many (default 100, max 1000)"
    )
    add_output_option(parser)
    add_client_options(parser)
    parser.set_defaults(handler=handle)


def request_from(args: argparse.Namespace) -> services_pb2.PendingWorkloadsRequest:
    namespace, local_queue = "", ""
    if args.local_queue:
        namespace, _, local_queue = args.local_queue.rpartition("/")
    return services_pb2.PendingWorkloadsRequest(
        cluster_queue=args.cluster_queue or "",
        namespace=namespace or ("default" if local_queue else ""),
        local_queue=local_queue,
        offset=args.offset,
        limit=args.limit,
    )


def handle(args: argparse.Namespace) -> int:
    with channel(args) as ch:
        try:
            reply = services_pb2_grpc.VisibilityStub(ch).PendingWorkloads(
                request_from(args), metadata=call_metadata(args), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            return report_error(args, exc)
    if args.output == "json":
        print(to_json(reply))
    else:
        sys.stdout.write(render_pending(reply, offset=args.offset))
    return EXIT_OK


def render_pending(reply: services_pb2.PendingWorkloadsResponse, *, offset: int) -> str:
    """The pending workloads as a table, with a "showing" line when it is one page of many."""
    if not reply.items:
        return f"No pending workloads (total {reply.total}).\n"
    rows = [
        [
            str(w.position_in_cluster_queue),
            str(w.position_in_local_queue),
            w.namespace,
            w.name,
            w.local_queue,
            w.cluster_queue,
            str(w.priority),
        ]
        for w in reply.items
    ]
    header = ["CQ-POS", "LQ-POS", "NAMESPACE", "NAME", "LOCALQUEUE", "CLUSTERQUEUE", "PRIORITY"]
    out = render_table(header, rows)
    if len(reply.items) < reply.total:
        out += f"showing {offset + 1}-{offset + len(reply.items)} of {reply.total}\n"
    return out
