"""`muster stop|resume workload|localqueue|clusterqueue NAME` and `muster delete workload NAME`.

kueuectl's verbs through the gateway (Gateway.Stop, Resume, Delete): stopping a workload sets
its spec.active to false (evicted if it holds quota, kept off its queue until resumed);
stopping a queue sets its stopPolicy to HoldAndDrain (its admitted workloads are evicted), or
to Hold with `--keep-already-running`; resume undoes either. `delete workload` stops it (its
pods too) and deletes it, after asking, unless `--yes`. A workload may be named as a user
would: its own name or its Job's.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any, Final

import grpc

from muster.cli.client import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    add_client_options,
    call_metadata,
    channel,
    report_error,
)
from muster.contracts.v1 import services_pb2, services_pb2_grpc

KINDS: Final = ("workload", "localqueue", "clusterqueue", "wl", "lq", "cq")
_RESOURCE: Final = {  # how kueuectl prints what it changed
    "Workload": "workload.kueue.x-k8s.io",
    "LocalQueue": "localqueue.kueue.x-k8s.io",
    "ClusterQueue": "clusterqueue.kueue.x-k8s.io",
}


def add_parsers(commands: Any) -> None:  # Any: argparse's _SubParsersAction is private
    for verb, about in (
        ("stop", "stop a workload (spec.active=false) or hold a LocalQueue or ClusterQueue"),
        ("resume", "resume a stopped workload, LocalQueue or ClusterQueue"),
    ):
        parser = commands.add_parser(
            verb, help=about, description=f"{about[0].upper()}{about[1:]}."
        )
        parser.add_argument("kind", choices=KINDS, metavar="KIND", help=", ".join(KINDS[:3]))
        _common(parser)
        if verb == "stop":
            parser.add_argument(
                "--keep-already-running",
                action="store_true",
                help="a queue: admit nothing more but let admitted workloads run (Hold); "
                "without, they are evicted (HoldAndDrain)",
            )
        parser.set_defaults(handler=handle, verb=verb)
    parser = commands.add_parser(
        "delete",
        help="delete a workload: it is stopped (its pods too) and forgotten",
        description="Delete a workload: its pods are stopped, its quota released, and it is "
        "forgotten (kueuectl delete workload).",
    )
    parser.add_argument("kind", choices=("workload", "wl"), metavar="KIND", help="workload")
    _common(parser)
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask first")
    parser.set_defaults(handler=handle, verb="delete")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="its name (a workload's own, or its Job's)")
    parser.add_argument(
        "-n",
        "--namespace",
        default="default",
        help="of a workload or LocalQueue (default: default)",
    )
    add_client_options(parser)


def handle(args: argparse.Namespace) -> int:
    ref = services_pb2.ObjectRef(kind=args.kind, namespace=args.namespace, name=args.name)
    key = uuid.uuid4().hex  # one per command: a retried call publishes nothing twice
    if args.verb == "delete" and not args.yes and not _confirmed(args):
        print("muster: not deleted", file=sys.stderr)
        return EXIT_FAILED
    with channel(args) as ch:
        stub = services_pb2_grpc.GatewayStub(ch)
        try:
            if args.verb == "stop":
                request = services_pb2.StopRequest(
                    object=ref, keep_already_running=args.keep_already_running, idempotency_key=key
                )
                reply = stub.Stop(request, metadata=call_metadata(args), timeout=args.timeout)
            elif args.verb == "resume":
                request_r = services_pb2.ResumeRequest(object=ref, idempotency_key=key)
                reply = stub.Resume(request_r, metadata=call_metadata(args), timeout=args.timeout)
            else:
                request_d = services_pb2.DeleteRequest(object=ref, idempotency_key=key)
                reply = stub.Delete(request_d, metadata=call_metadata(args), timeout=args.timeout)
        except grpc.RpcError as exc:
            return report_error(args, exc)
    print(f"{_RESOURCE.get(reply.kind, reply.kind)}/{reply.key} {reply.message}")
    return EXIT_OK


def _confirmed(args: argparse.Namespace) -> bool:
    """Ask on the terminal; without one, refuse (--yes says it)."""
    if not sys.stdin.isatty():
        print("muster: delete asks first: add --yes to delete without a terminal", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)
    answer = input(f"Delete workload {args.namespace}/{args.name} and stop its pods? [y/N] ")
    return answer.strip().lower() in ("y", "yes")
