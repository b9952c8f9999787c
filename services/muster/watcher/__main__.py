"""`muster service watcher`: publish what one cluster's objects mean (docs/services.md)."""

from __future__ import annotations

import argparse
import functools
import sys

from muster.bus import Bus
from muster.bus.service import Health, ServiceConfig, ServiceMain, parse_service, service_main
from muster.cluster.choose import (
    BACKEND_FLAGS,
    STATUS_FLAGS,
    BackendConfig,
    backend_config,
    open_backend,
)
from muster.watcher.service import WatcherConfig, run_watcher

NAME = "watcher"
DESCRIPTION = (
    "Watch one cluster and publish submitted, config and pod events; on Kubernetes, also "
    "create queued Jobs' Kueue Workloads and write Kueue statuses."
)
FLAGS = (*BACKEND_FLAGS, *STATUS_FLAGS)


def main(argv: list[str]) -> int:
    """Run the watcher until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, build=build)


def parse(argv: list[str]) -> tuple[ServiceConfig, ServiceMain]:
    """What `main(argv)` would run, without running it."""
    return parse_service(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, make=build)


def build(args: argparse.Namespace, config: ServiceConfig) -> ServiceMain:
    backend = backend_config(args)
    watcher = WatcherConfig(cluster=config.cluster, kueue_version=backend.kube.kueue_version)
    return functools.partial(serve, config=watcher, backend=backend)


async def serve(bus: Bus, health: Health, *, config: WatcherConfig, backend: BackendConfig) -> None:
    """Watch cluster `config.cluster`, simulated or Kubernetes (`backend`)."""
    async with open_backend(
        backend, js=bus.js, cluster=config.cluster, publisher=bus.publisher
    ) as opened:
        await run_watcher(bus, health, backend=opened.backend, config=config, kueue=opened.status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
