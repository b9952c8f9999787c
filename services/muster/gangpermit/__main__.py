"""`muster service gangpermit`: place each admitted gang whole, or time it out."""

from __future__ import annotations

import argparse
import functools
import os
import sys

from muster.bus import Bus
from muster.bus.service import Health, add_common_flags, config_from_args, run_service
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore
from muster.gangpermit.service import GangPermitConfig, run_gangpermit

NAME = "gangpermit"


def main(argv: list[str]) -> int:
    """Run gangpermit until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    parser = argparse.ArgumentParser(
        prog=f"muster service {NAME}",
        description="Find nodes for every pod of an admitted gang at once, or reject it.",
    )
    add_common_flags(parser)
    parser.add_argument(
        "--gang-timeout-seconds",
        metavar="S",
        type=float,
        default=os.environ.get("MUSTER_GANG_TIMEOUT_SECONDS") or "300",
        help="a gang not placed this long after admission is rejected "
        "(MUSTER_GANG_TIMEOUT_SECONDS, default 300)",
    )
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args, NAME)
        gang = GangPermitConfig(cluster=config.cluster, gang_timeout_s=args.gang_timeout_seconds)
    except ValueError as exc:
        parser.error(str(exc))
    return run_service(config, functools.partial(serve, config=gang))


async def serve(bus: Bus, health: Health, *, config: GangPermitConfig) -> None:
    """Place gangs on the simulated cluster `config.cluster` over the service's connection."""
    backend = SimBackend(await SimStore.open(bus.js, cluster=config.cluster))
    await run_gangpermit(bus, health, backend=backend, config=config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
