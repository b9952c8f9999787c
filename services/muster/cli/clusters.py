"""`muster clusters`: each cluster as its gang-permit last reported it, from Visibility.Clusters.

Without `--nodes`: one row per cluster, its state, node count, free of allocatable per
resource and the age of its last heartbeat (the gateway's totals; no node travels).
`muster clusters NAME --nodes` pages through that cluster's nodes (`--limit`, then the
`--continue` token it prints), so a 50 000-node cluster is read a page at a time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any, Final

import grpc

from muster.cli.client import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    add_client_options,
    call_metadata,
    channel,
    print_structured,
    render_table,
    report_error,
)
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.gateway.node_pages import MAX_LIMIT

NODES_PAGE: Final = 500  # nodes a page holds unless --limit says otherwise


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "clusters",
        help="show each cluster's nodes and room as last reported",
        description="Show each cluster's state, node count, free of allocatable per resource "
        "and the age of its last heartbeat; with --nodes, a page of its nodes.",
    )
    parser.add_argument("name", nargs="?", default="", metavar="NAME", help="only this cluster")
    parser.add_argument("--nodes", action="store_true", help="list nodes, a page at a time")
    parser.add_argument(
        "--limit",
        metavar="N",
        type=int,
        default=None,
        help=f"nodes per page with --nodes (default {NODES_PAGE})",
    )
    parser.add_argument(
        "--continue",
        dest="continue_token",
        metavar="TOKEN",
        default="",
        help="the next page: the token the previous page printed",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="output format (default %(default)s)",
    )
    add_client_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if not args.nodes and (args.limit is not None or args.continue_token):
        flag = "--limit" if args.limit is not None else "--continue"
        print(f"muster: {flag}: pages nodes; add --nodes", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.limit is not None and not 1 <= args.limit <= MAX_LIMIT:
        print(f"muster: --limit: must be from 1 to {MAX_LIMIT}, got {args.limit}", file=sys.stderr)
        return EXIT_BAD_INPUT
    request = services_pb2.ClustersRequest(
        cluster=args.name,
        without_nodes=not args.nodes,
        limit=(args.limit or NODES_PAGE) if args.nodes else 0,
        continue_token=args.continue_token,
    )
    with channel(args) as ch:
        try:
            reply = services_pb2_grpc.VisibilityStub(ch).Clusters(
                request, metadata=call_metadata(args), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            return report_error(args, exc)
    if args.output != "table":
        print_structured(reply, args.output)
    elif args.nodes:
        sys.stdout.write(render_nodes(reply))
        if reply.continue_token:
            more = (
                f"muster clusters {args.name} --nodes" if args.name else "muster clusters --nodes"
            )
            print(
                f"{reply.remaining_node_count} more nodes: {more} --continue "
                f"{reply.continue_token}",
                file=sys.stderr,
            )
    else:
        sys.stdout.write(render_clusters(reply))
    return EXIT_OK


def render_clusters(reply: services_pb2.ClustersResponse) -> str:
    """One row per cluster: state, nodes, free of allocatable per resource, heartbeat age."""
    if not reply.clusters:
        return "No cluster has reported yet.\n"
    rows = [
        [
            c.name,
            f"{c.state} ({c.reason})" if c.reason else c.state,
            str(c.node_count),
            room_text(c.free_total, c.allocatable_total) or "-",
            f"{c.heartbeat_age_seconds:g}s",
            c.message or "-",
        ]
        for c in reply.clusters
    ]
    header = ["CLUSTER", "STATE", "NODES", "FREE/ALLOCATABLE", "HEARTBEAT-AGE", "MESSAGE"]
    return render_table(header, rows)


def render_nodes(reply: services_pb2.ClustersResponse) -> str:
    """One row per node of the page: its room, and the workloads with pods bound there."""
    rows = [
        [
            c.name,
            n.name,
            room_text(n.free, n.allocatable) or "-",
            str(len(n.pods)),
            ",".join(n.workloads) or "-",
        ]
        for c in reply.clusters
        for n in c.nodes
    ]
    if not rows:
        return "No nodes.\n"
    return render_table(["CLUSTER", "NODE", "FREE/ALLOCATABLE", "PODS", "WORKLOADS"], rows)


def room_text(free: Mapping[str, str], allocatable: Mapping[str, str]) -> str:
    """ "cpu=3/8,memory=10Gi/32Gi": free of allocatable per resource, by name."""
    names = sorted({*free, *allocatable})
    return ",".join(f"{r}={free.get(r, '0')}/{allocatable.get(r, '?')}" for r in names)
