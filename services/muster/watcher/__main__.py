"""`muster service watcher`: publish what one cluster's objects mean (docs/services.md)."""

from __future__ import annotations

import argparse
import functools
import sys

from muster.bus import Bus
from muster.bus.service import Health, add_common_flags, config_from_args, run_service
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore
from muster.watcher.service import WatcherConfig, run_watcher

NAME = "watcher"


def main(argv: list[str]) -> int:
    """Run the watcher until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    parser = argparse.ArgumentParser(
        prog=f"muster service {NAME}",
        description="Watch one cluster and publish submitted, config and pod events.",
    )
    add_common_flags(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args, NAME)
    except ValueError as exc:
        parser.error(str(exc))
    return run_service(
        config, functools.partial(serve, config=WatcherConfig(cluster=config.cluster))
    )


async def serve(bus: Bus, health: Health, *, config: WatcherConfig) -> None:
    """Watch the simulated cluster `config.cluster` over the service's own connection."""
    backend = SimBackend(await SimStore.open(bus.js, cluster=config.cluster))
    await run_watcher(bus, health, backend=backend, config=config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
