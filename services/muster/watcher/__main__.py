"""`muster service watcher`: publish what one cluster's objects mean (docs/services.md)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys

from muster.bus import Bus
from muster.bus.service import (
    Flag,
    Health,
    ServiceConfig,
    ServiceMain,
    parse_service,
    service_main,
)
from muster.checks.registry import CONTROLLERS, controller_names
from muster.cluster.choose import (
    BACKEND_FLAGS,
    STATUS_FLAGS,
    BackendConfig,
    OpenCluster,
    backend_config,
    open_backend,
)
from muster.watcher.service import WatcherConfig, run_watcher

NAME = "watcher"
DESCRIPTION = (
    "Watch one cluster and publish submitted, config and pod events; on Kubernetes, also "
    "create queued Jobs' Kueue Workloads, write Kueue statuses and run admission check "
    "controllers."
)
CHECK_FLAGS = (
    Flag("--check-controllers", "NAMES", str, "MUSTER_CHECK_CONTROLLERS", ",".join(CONTROLLERS),
         "kube: the admission check controllers to run, comma-separated (none: none), from: "
         + ", ".join(CONTROLLERS)),
)  # fmt: skip
FLAGS = (*BACKEND_FLAGS, *STATUS_FLAGS, *CHECK_FLAGS)


def main(argv: list[str]) -> int:
    """Run the watcher until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, build=build)


def parse(argv: list[str]) -> tuple[ServiceConfig, ServiceMain]:
    """What `main(argv)` would run, without running it."""
    return parse_service(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, make=build)


def build(args: argparse.Namespace, config: ServiceConfig) -> ServiceMain:
    backend = backend_config(args)
    watcher = WatcherConfig(
        cluster=config.cluster,
        kueue_version=backend.kube.kueue_version,
        check_controllers=controller_names(args.check_controllers),
    )
    return functools.partial(serve, config=watcher, backend=backend)


async def serve(bus: Bus, health: Health, *, config: WatcherConfig, backend: BackendConfig) -> None:
    """Watch cluster `config.cluster`, simulated or Kubernetes (`backend`); on Kubernetes,
    run the admission check controllers beside."""
    async with (
        open_backend(backend, js=bus.js, cluster=config.cluster, publisher=bus.publisher) as opened,
        asyncio.TaskGroup() as tasks,
    ):
        if opened.status is not None and config.check_controllers:
            tasks.create_task(_run_checks(opened, backend, config), name="watcher-checks")
        await run_watcher(bus, health, backend=opened.backend, config=config, kueue=opened.status)


async def _run_checks(opened: OpenCluster, backend: BackendConfig, config: WatcherConfig) -> None:
    # Imported here: the client library is loaded by services on Kubernetes only.
    from muster.checks.registry import make
    from muster.checks.runner import CheckRunner
    from muster.cluster.kube.backend import KubeBackend

    assert isinstance(opened.backend, KubeBackend)
    controllers = make(config.check_controllers, kueue_version=config.kueue_version)
    runner = CheckRunner(
        opened.backend.transport,
        controllers,
        kueue_version=config.kueue_version,
        watch=backend.kube.watch,
    )
    await runner.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
