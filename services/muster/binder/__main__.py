"""`muster service binder`: start, bind and stop one cluster's pods (docs/services.md)."""

from __future__ import annotations

import argparse
import functools
import os
import sys

from muster.binder.service import BinderConfig, run_binder
from muster.bus import Bus
from muster.bus.service import Health, add_common_flags, config_from_args, run_service
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore

NAME = "binder"


def main(argv: list[str]) -> int:
    """Run the binder until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    parser = argparse.ArgumentParser(
        prog=f"muster service {NAME}",
        description="Start admitted workloads' pods, bind permitted gangs, stop evicted ones.",
    )
    add_common_flags(parser)
    parser.add_argument(
        "--max-concurrent-binds",
        metavar="N",
        type=int,
        default=os.environ.get("MUSTER_MAX_CONCURRENT_BINDS") or "16",
        help="binds in flight at once, at most (MUSTER_MAX_CONCURRENT_BINDS, default 16)",
    )
    parser.add_argument(
        "--binds-per-second",
        metavar="R",
        type=float,
        default=os.environ.get("MUSTER_BINDS_PER_SECOND") or "0",
        help="binds started per second, at most; 0 = unlimited (MUSTER_BINDS_PER_SECOND)",
    )
    args = parser.parse_args(argv)
    if args.max_concurrent_binds < 1:
        parser.error(f"--max-concurrent-binds must be >= 1, got {args.max_concurrent_binds}")
    if args.binds_per_second < 0:
        parser.error(f"--binds-per-second must be >= 0, got {args.binds_per_second:g}")
    try:
        config = config_from_args(args, NAME)
    except ValueError as exc:
        parser.error(str(exc))
    binder = BinderConfig(
        cluster=config.cluster,
        max_concurrent_binds=args.max_concurrent_binds,
        binds_per_second=args.binds_per_second,
    )
    return run_service(config, functools.partial(serve, config=binder))


async def serve(bus: Bus, health: Health, *, config: BinderConfig) -> None:
    """Bind on the simulated cluster `config.cluster` over the service's own connection."""
    backend = SimBackend(await SimStore.open(bus.js, cluster=config.cluster))
    await run_binder(bus, health, backend=backend, config=config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
