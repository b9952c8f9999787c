"""`muster describe workload NAME`: one workload as `kubectl describe` would show it.

From the gateway's Visibility.DescribeWorkload: where it is queued and its position, its
status and why, its admission (flavors per podset), its route, its conditions, where its pods
are bound, and its last events, repeated ones folded (`x3`). NAME is any name a user would
type: the workload's, its Job's, a gang's.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

import grpc

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


def add_parser(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    parser = commands.add_parser(
        "describe",
        help="show one workload: conditions, events, position, where its pods are",
        description="Show one workload as `kubectl describe workload` would: its queue and "
        "position, conditions, admission, route, pods and nodes, and its last events.",
    )
    parser.add_argument("kind", choices=("workload", "wl"), metavar="KIND", help="workload")
    parser.add_argument("name", metavar="NAME", help="its name, its Job's, or a gang's")
    parser.add_argument("-n", "--namespace", default="default", help="(default: default)")
    parser.add_argument(
        "-o", "--output", choices=("text", "json", "yaml"), default="text", help="(text)"
    )
    add_client_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    request = services_pb2.DescribeWorkloadRequest(namespace=args.namespace, name=args.name)
    with channel(args) as ch:
        try:
            reply = services_pb2_grpc.VisibilityStub(ch).DescribeWorkload(
                request, metadata=call_metadata(args), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            return report_error(args, exc)
    if args.output == "text":
        sys.stdout.write(render_description(reply))
    else:
        print_structured(reply, args.output)
    return EXIT_OK


def _when(ns: int) -> str:
    if not ns:
        return "-"
    at = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC)
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


def render_description(d: services_pb2.WorkloadDescription) -> str:
    """The text of `muster describe workload`: fields, then tables."""
    s = d.summary
    fields = [
        ("Name", s.name),
        ("Namespace", s.namespace),
        ("Owner", f"{s.owner_kind}/{s.owner_name}" if s.owner_name else "-"),
        ("LocalQueue", s.local_queue or "- (a gang outside Kueue)"),
        ("ClusterQueue", s.cluster_queue or "-"),
        ("Status", s.status + (" (succeeded)" if s.succeeded else "")),
        ("Reason", f"{s.reason}: {s.message}".strip(": ") or "-"),
        ("Priority", str(s.priority)),
        ("Position", _positions(s)),
        ("Submitted", _when(s.submitted_unix_nano)),
        ("Admitted", _when(s.admitted_unix_nano)),
        ("Finished", _when(s.finished_unix_nano)),
        ("Cluster", s.cluster or "-"),
        ("Evictions", str(s.evictions)),
    ]
    if d.HasField("route"):
        r = d.route
        fields.append(("Route", f"{r.from_cluster_queue} → {r.to_cluster_queue} ({r.policy})"))
    width = max(len(k) for k, _ in fields) + 2
    out = "".join(f"{k + ':':<{width}}{v}\n" for k, v in fields)
    out += _section("Admission", ["PODSET", "COUNT", "FLAVORS", "USAGE"], _admission_rows(d))
    conditions = [
        [c.type, c.status, c.reason, c.message + _retries(c), _when(c.time_unix_nano)]
        for c in d.conditions
    ]
    out += _section("Conditions", ["TYPE", "STATUS", "REASON", "MESSAGE", "SINCE"], conditions)
    pods = [[p.pod.name, p.pod.pod_set or "-", p.node] for p in d.pods]
    out += _section("Pods", ["POD", "PODSET", "NODE"], pods)
    events = [
        [
            str(e.sequence),
            _when(e.time_unix_nano),
            e.type,
            e.detail + (f" (x{e.count})" if e.count > 1 else ""),
        ]
        for e in d.events
    ]
    out += _section("Events", ["SEQ", "TIME", "TYPE", "DETAIL"], events)
    return out


def _positions(s: services_pb2.WorkloadSummary) -> str:
    if s.position_in_local_queue < 0:
        return "-"
    return (
        f"{s.position_in_local_queue} in LocalQueue {s.local_queue}, "
        f"{s.position_in_cluster_queue} in ClusterQueue {s.cluster_queue}"
    )


def _admission_rows(d: services_pb2.WorkloadDescription) -> list[list[str]]:
    if not d.HasField("admission"):
        return []
    return [
        [
            ps.name,
            str(ps.count),
            " ".join(f"{r}={f}" for r, f in sorted(ps.flavors.items())),
            " ".join(f"{r}={q}" for r, q in sorted(ps.resource_usage.items())),
        ]
        for ps in d.admission.pod_set_assignments
    ]


def _section(title: str, header: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return f"\n{title}: <none>\n"
    body = render_table(header, rows)
    return f"\n{title}:\n" + "".join(f"  {line}\n" for line in body.splitlines())


def _retries(c: services_pb2.WorkloadCondition) -> str:
    """An admission check's retryCount, after its message."""
    return f" (retryCount {c.retry_count})" if c.retry_count else ""
