"""`muster workloads`: every workload in any state, as kueuectl's `list workload` shows them.

Reads the gateway's Visibility.ListWorkloads: filters by namespace, ClusterQueue, LocalQueue and
status (`--status pending|quotareserved|admitted|finished|inactive`, repeatable), any name a user
would type (`--name`: a workload's, its Job's, a gang's). A pending workload shows its position
in its LocalQueue (kueuectl's POSITION IN QUEUE); `-o wide` adds priority, the position in the
ClusterQueue, the cluster, the nodes and why it waits; `-o json|yaml` the whole answer.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import grpc

from muster.api.quantity import shown
from muster.cli.client import (
    EXIT_OK,
    add_client_options,
    call_metadata,
    channel,
    print_structured,
    render_table,
    report_error,
)
from muster.contracts.v1 import services_pb2, services_pb2_grpc

OUTPUTS = ("table", "wide", "json", "yaml")
# kueuectl's --status values, as the gateway takes them (gateway.workloads.STATUS_FILTERS):
# checked here so that a typo is told with the flag's name before any call.
STATUSES = ("all", "pending", "quotareserved", "admitted", "finished", "inactive")


def status_argument(text: str) -> str:
    """One --status value, any case; ArgumentTypeError naming the valid ones."""
    if text.lower() not in STATUSES:
        raise argparse.ArgumentTypeError(
            f"unknown status {shown(text)}: one of {', '.join(STATUSES)}"
        )
    return text.lower()


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "workloads",
        help="list workloads in every state, with filters (kueuectl list workload)",
        description="List the workloads muster knows (live ones, and the most recently "
        "finished), pending ones with their position in their LocalQueue.",
    )
    parser.add_argument("-n", "--namespace", metavar="NS", default="", help="one namespace")
    parser.add_argument("--cluster-queue", metavar="CQ", default="", help="one ClusterQueue")
    parser.add_argument(
        "--local-queue",
        metavar="[NS/]LQ",
        default="",
        help="one LocalQueue (in --namespace, else default, unless NS/ is given)",
    )
    parser.add_argument(
        "--status",
        dest="statuses",
        metavar="STATUS",
        action="append",
        type=status_argument,
        default=[],
        help=f"{', '.join(STATUSES[:-1])} or {STATUSES[-1]} (repeatable)",
    )
    parser.add_argument(
        "--name", default="", help="a workload's name, its Job's, or a gang's (its source's)"
    )
    parser.add_argument(
        "-o", "--output", choices=OUTPUTS, default="table", help="output (default %(default)s)"
    )
    add_client_options(parser)
    parser.set_defaults(handler=handle)


def request_from(args: argparse.Namespace) -> services_pb2.ListWorkloadsRequest:
    namespace, local_queue = args.namespace, args.local_queue
    if "/" in local_queue:
        namespace, _, local_queue = local_queue.partition("/")
    return services_pb2.ListWorkloadsRequest(
        namespace=namespace,
        cluster_queue=args.cluster_queue,
        local_queue=local_queue,
        statuses=args.statuses,
        name=args.name,
    )


def handle(args: argparse.Namespace) -> int:
    with channel(args) as ch:
        try:
            reply = services_pb2_grpc.VisibilityStub(ch).ListWorkloads(
                request_from(args), metadata=call_metadata(args), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            return report_error(args, exc)
    if args.output in ("json", "yaml"):
        print_structured(reply, args.output)
    else:
        sys.stdout.write(render_workloads(reply.items, wide=args.output == "wide"))
    return EXIT_OK


def render_workloads(
    items: Sequence[services_pb2.WorkloadSummary], *, wide: bool, now_ns: int | None = None
) -> str:
    """kueuectl's columns; `wide` adds priority, ClusterQueue position, cluster, nodes, reason."""
    if not items:
        return "No workloads found.\n"
    now = time.time_ns() if now_ns is None else now_ns
    header = ["NAMESPACE", "NAME", "JOB", "LOCALQUEUE", "CLUSTERQUEUE", "STATUS", "POSITION"]
    header += ["EXEC-TIME", "AGE"]
    if wide:
        header += ["PRIORITY", "CQ-POSITION", "CLUSTER", "NODES", "REASON"]
    rows = []
    for w in items:
        row = [
            w.namespace,
            w.name,
            f"{w.owner_kind.lower()}/{w.owner_name}" if w.owner_name else "-",
            w.local_queue or "-",
            w.cluster_queue or "-",
            w.status,
            _position(w.position_in_local_queue),
            _exec_time(w, now),
            human_duration(now - w.submitted_unix_nano),
        ]
        if wide:
            row += [
                str(w.priority),
                _position(w.position_in_cluster_queue),
                w.cluster or "-",
                ",".join(w.nodes) or "-",
                f"{w.reason}: {w.message}".strip(": ") or "-",
            ]
        rows.append(row)
    return render_table(header, rows)


def _position(position: int) -> str:
    return "-" if position < 0 else str(position)


def _exec_time(w: services_pb2.WorkloadSummary, now_ns: int) -> str:
    """How long it ran since its last admission (to its end, once finished), as kueuectl."""
    if not w.admitted_unix_nano or w.status not in ("ADMITTED", "FINISHED", "PERMITTED"):
        return "-"
    end = w.finished_unix_nano if w.finished_unix_nano else now_ns
    return human_duration(end - w.admitted_unix_nano)


def human_duration(ns: int) -> str:
    """kubectl's short ages: 45s, 3m12s, 2h5m, 3d4h."""
    seconds = max(0, ns // 1_000_000_000)
    if seconds < 120:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds}s" if minutes < 10 and seconds else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"
