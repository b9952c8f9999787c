"""`muster service gangpermit`: place each admitted gang whole, or time it out."""

from __future__ import annotations

import functools
import sys

from muster.bus import Bus
from muster.bus.service import Flag, Health, service_main
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore
from muster.gangpermit.service import GangPermitConfig, run_gangpermit

NAME = "gangpermit"


def main(argv: list[str]) -> int:
    """Run gangpermit until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(
        argv,
        name=NAME,
        description="Find nodes for every pod of an admitted gang at once, or reject it.",
        flags=(
            Flag(
                "--gang-timeout-seconds",
                "S",
                float,
                "MUSTER_GANG_TIMEOUT_SECONDS",
                "300",
                "a gang not placed this long after admission is rejected",
            ),
        ),
        build=lambda args, config: functools.partial(
            serve,
            config=GangPermitConfig(
                cluster=config.cluster, gang_timeout_s=args.gang_timeout_seconds
            ),
        ),
    )


async def serve(bus: Bus, health: Health, *, config: GangPermitConfig) -> None:
    """Place gangs on the simulated cluster `config.cluster` over the service's connection."""
    backend = SimBackend(await SimStore.open(bus.js, cluster=config.cluster))
    await run_gangpermit(bus, health, backend=backend, config=config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
