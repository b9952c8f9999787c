"""`muster service gangpermit`: place each gang whole, or time it out (docs/services.md)."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import cast

from muster.bus import Bus
from muster.bus.service import Flag, Health, ServiceConfig, parse_service, service_main
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore
from muster.core.placement.model import Scoring
from muster.gangpermit.service import GangPermitConfig, run_gangpermit

NAME = "gangpermit"
SCORINGS = ("binpack", "spread")


def on_off(text: str) -> bool:
    """ "on"/"off" (or true/false, 1/0) as a bool; ValueError otherwise."""
    value = text.strip().lower()
    if value in ("on", "true", "1", "yes"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    raise ValueError(f"expected on or off, got {text!r}")


FLAGS = (
    Flag(
        "--gang-timeout-seconds",
        "S",
        float,
        "MUSTER_GANG_TIMEOUT_SECONDS",
        "300",
        "a gang not placed this long after its first attempt is rejected, whole "
        "(a PodGroup's scheduleTimeoutSeconds wins)",
    ),
    Flag(
        "--scheduler-name",
        "NAME",
        str,
        "MUSTER_SCHEDULER_NAME",
        "muster",
        "place the pods whose spec.schedulerName is NAME; leave the others alone",
    ),
    Flag(
        "--scoring",
        "|".join(SCORINGS),
        str,
        "MUSTER_SCORING",
        "binpack",
        "fill the fullest nodes first (binpack) or the emptiest (spread)",
    ),
    Flag(
        "--placement-preemption",
        "on|off",
        on_off,
        "MUSTER_PLACEMENT_PREEMPTION",
        "on",
        "evict lower-priority workloads, whole, when only they keep a gang from fitting",
    ),
)
DESCRIPTION = "Place every pod of a gang at once on one cluster, or reject them together."


def main(argv: list[str]) -> int:
    """Run gangpermit until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(
        argv,
        name=NAME,
        description=DESCRIPTION,
        flags=FLAGS,
        build=lambda args, config: functools.partial(serve, config=gang_config(args, config)),
    )


def configs(argv: list[str]) -> tuple[ServiceConfig, GangPermitConfig]:
    """The service's and gangpermit's configuration from `argv` and the environment."""
    return parse_service(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, make=gang_config)


def gang_config(args: argparse.Namespace, config: ServiceConfig) -> GangPermitConfig:
    if args.scoring not in SCORINGS:
        raise ValueError(f"--scoring must be one of {', '.join(SCORINGS)}, got {args.scoring!r}")
    return GangPermitConfig(
        cluster=config.cluster,
        gang_timeout_s=args.gang_timeout_seconds,
        scheduler_name=args.scheduler_name,
        scoring=cast(Scoring, args.scoring),
        preemption=args.placement_preemption,
    )


async def serve(bus: Bus, health: Health, *, config: GangPermitConfig) -> None:
    """Place gangs on the simulated cluster `config.cluster` over the service's connection."""
    backend = SimBackend(await SimStore.open(bus.js, cluster=config.cluster))
    await run_gangpermit(bus, health, backend=backend, config=config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
