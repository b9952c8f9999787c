"""`muster service watcher`: publish what one cluster's objects mean (docs/services.md)."""

from __future__ import annotations

import functools
import sys

from muster.bus import Bus
from muster.bus.service import Health, service_main
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore
from muster.watcher.service import WatcherConfig, run_watcher

NAME = "watcher"


def main(argv: list[str]) -> int:
    """Run the watcher until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(
        argv,
        name=NAME,
        description="Watch one cluster and publish submitted, config and pod events.",
        build=lambda _, config: functools.partial(
            serve, config=WatcherConfig(cluster=config.cluster)
        ),
    )


async def serve(bus: Bus, health: Health, *, config: WatcherConfig) -> None:
    """Watch the simulated cluster `config.cluster` over the service's own connection."""
    backend = SimBackend(await SimStore.open(bus.js, cluster=config.cluster))
    await run_watcher(bus, health, backend=backend, config=config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
