"""`muster service binder`: start, bind and stop one cluster's pods (docs/services.md)."""

from __future__ import annotations

import argparse
import functools
import sys

from muster.binder.service import BinderConfig, run_binder
from muster.bus import Bus
from muster.bus.service import Flag, Health, ServiceConfig, ServiceMain, service_main
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore

NAME = "binder"


def main(argv: list[str]) -> int:
    """Run the binder until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(
        argv,
        name=NAME,
        description="Start admitted workloads' pods, bind permitted gangs, stop evicted ones.",
        flags=(
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
        ),
        build=build,
    )


def build(args: argparse.Namespace, config: ServiceConfig) -> ServiceMain:
    if args.max_concurrent_binds < 1:
        raise ValueError(f"--max-concurrent-binds must be >= 1, got {args.max_concurrent_binds}")
    if args.binds_per_second < 0:
        raise ValueError(f"--binds-per-second must be >= 0, got {args.binds_per_second:g}")
    binder = BinderConfig(
        cluster=config.cluster,
        max_concurrent_binds=args.max_concurrent_binds,
        binds_per_second=args.binds_per_second,
    )
    return functools.partial(serve, config=binder)


async def serve(bus: Bus, health: Health, *, config: BinderConfig) -> None:
    """Bind on the simulated cluster `config.cluster` over the service's own connection."""
    backend = SimBackend(await SimStore.open(bus.js, cluster=config.cluster))
    await run_binder(bus, health, backend=backend, config=config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
