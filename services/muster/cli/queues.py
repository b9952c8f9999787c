"""`muster queues`: the quota view of every ClusterQueue, from the gateway's Visibility service.

Per ClusterQueue: active or not, pending/reserving/admitted workload counts, and per flavor
and resource the nominal quota, borrowing limit, reserved, used and available amounts; then
the LocalQueues.
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
        "queues",
        help="show ClusterQueues' quota and usage, and LocalQueues",
        description="Show each ClusterQueue's workload counts and, per flavor and resource, "
        "nominal quota, borrowing limit, reserved, used and available; then the LocalQueues.",
    )
    parser.add_argument("--cluster-queue", metavar="CQ", default="", help="only this ClusterQueue")
    add_output_option(parser)
    add_client_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    request = services_pb2.QueueStatusRequest(cluster_queue=args.cluster_queue)
    with channel(args) as ch:
        try:
            reply = services_pb2_grpc.VisibilityStub(ch).QueueStatus(
                request, metadata=call_metadata(args), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            return report_error(args, exc)
    if args.output == "json":
        print(to_json(reply))
    else:
        sys.stdout.write(render_queue_status(reply))
    return EXIT_OK


def render_queue_status(reply: services_pb2.QueueStatusResponse) -> str:
    """The three tables of `muster queues`: ClusterQueues, their quota, LocalQueues."""
    if not reply.cluster_queues and not reply.local_queues:
        return "No queues yet.\n"
    counts = [
        [
            cq.name,
            cq.cohort or "-",
            "yes" if cq.active else f"no ({cq.inactive_reason})" if cq.inactive_reason else "no",
            str(cq.pending_workloads),
            str(cq.reserving_workloads),
            str(cq.admitted_workloads),
        ]
        for cq in reply.cluster_queues
    ]
    quota = [
        [
            cq.name,
            flavor.name,
            r.name,
            r.nominal or "0",
            r.borrowing_limit or "-",
            r.reserved or "0",
            r.used or "0",
            r.borrowed or "0",
            r.available or "0",
        ]
        for cq in reply.cluster_queues
        for flavor in cq.flavors
        for r in flavor.resources
    ]
    locals_ = [
        [
            lq.namespace,
            lq.name,
            lq.cluster_queue,
            str(lq.pending_workloads),
            str(lq.reserving_workloads),
            str(lq.admitted_workloads),
        ]
        for lq in reply.local_queues
    ]
    parts = []
    if counts:
        header = ["CLUSTERQUEUE", "COHORT", "ACTIVE", "PENDING", "RESERVING", "ADMITTED"]
        parts.append(render_table(header, counts))
    if quota:
        header = [
            "CLUSTERQUEUE",
            "FLAVOR",
            "RESOURCE",
            "NOMINAL",
            "BORROWING-LIMIT",
            "RESERVED",
            "USED",
            "BORROWED",
            "AVAILABLE",
        ]
        parts.append(render_table(header, quota))
    if locals_:
        header = ["NAMESPACE", "LOCALQUEUE", "CLUSTERQUEUE", "PENDING", "RESERVING", "ADMITTED"]
        parts.append(render_table(header, locals_))
    return "\n".join(parts)
