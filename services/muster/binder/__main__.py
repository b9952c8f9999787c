"""`muster service binder`: start, bind and stop one cluster's pods (docs/services.md)."""

from __future__ import annotations

import argparse
import functools
import sys

from muster.binder.service import BinderConfig, run_binder
from muster.bus import Bus
from muster.bus.service import (
    ENDED_KEPT_FLAG,
    Flag,
    Health,
    ServiceConfig,
    ServiceMain,
    parse_service,
    service_main,
)
from muster.cluster.choose import BACKEND_FLAGS, BackendConfig, backend_config, open_backend

NAME = "binder"
BOUND_EVENTS = ("all", "binds")
DESCRIPTION = "Start admitted workloads' pods, bind permitted gangs, stop evicted ones."
FLAGS = (
    Flag(
        "--max-concurrent-binds",
        "N",
        int,
        "MUSTER_MAX_CONCURRENT_BINDS",
        "16",
        "binds in flight at once, at most",
    ),
    Flag(
        "--binds-per-second",
        "R",
        float,
        "MUSTER_BINDS_PER_SECOND",
        "0",
        "binds started per second, at most; 0 = unlimited",
    ),
    Flag(
        "--bound-events",
        "all|binds",
        str,
        "MUSTER_BINDER_BOUND_EVENTS",
        "all",
        "when `bound` is published: all, for every permit; binds, only for pods bound, not "
        "for a whole permit whose pods it creates on their nodes (one stored event fewer per "
        'workload; docs/events.md, "`bound` only for binds")',
    ),
    ENDED_KEPT_FLAG,
    *BACKEND_FLAGS,
)


def main(argv: list[str]) -> int:
    """Run the binder until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, build=build)


def parse(argv: list[str]) -> tuple[ServiceConfig, ServiceMain]:
    """What `main(argv)` would run, without running it."""
    return parse_service(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, make=build)


def build(args: argparse.Namespace, config: ServiceConfig) -> ServiceMain:
    if args.max_concurrent_binds < 1:
        raise ValueError(f"--max-concurrent-binds must be >= 1, got {args.max_concurrent_binds}")
    if args.binds_per_second < 0:
        raise ValueError(f"--binds-per-second must be >= 0, got {args.binds_per_second:g}")
    if args.bound_events not in BOUND_EVENTS:
        raise ValueError(f"--bound-events must be all or binds, got {args.bound_events!r}")
    binder = BinderConfig(
        cluster=config.cluster,
        max_concurrent_binds=args.max_concurrent_binds,
        binds_per_second=args.binds_per_second,
        ended_kept_s=args.ended_kept_seconds,
        bound_for_created=args.bound_events == "all",
    )
    return functools.partial(serve, config=binder, backend=backend_config(args))


async def serve(bus: Bus, health: Health, *, config: BinderConfig, backend: BackendConfig) -> None:
    """Bind on cluster `config.cluster`, simulated or Kubernetes (`backend`)."""
    async with open_backend(backend, buckets=bus.kv, cluster=config.cluster) as opened:
        copies = None
        if backend.kind == "kube":
            # Imported here: the client library is loaded by services on Kubernetes only.
            from muster.cluster.kube.backend import KubeBackend

            assert isinstance(opened.backend, KubeBackend)
            copies = opened.backend  # MultiKueue's copies here are collected when stale
        await run_binder(bus, health, backend=opened.backend, config=config, copies=copies)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
