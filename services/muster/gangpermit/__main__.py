"""`muster service gangpermit`: place each gang whole, or time it out (docs/services.md)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from collections.abc import AsyncIterator
from typing import cast

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
from muster.cluster.choose import (
    BACKEND_FLAGS,
    BackendConfig,
    OpenCluster,
    backend_config,
    event_recorder,
    on_off,
    open_backend,
)
from muster.cluster.refusals import rejected_event
from muster.core.placement.model import Scoring
from muster.gangpermit.cache import Warn
from muster.gangpermit.service import GangPermitConfig, run_gangpermit

NAME = "gangpermit"
SCORINGS = ("binpack", "spread")


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
    Flag(
        "--heartbeat-seconds",
        "S",
        float,
        "MUSTER_HEARTBEAT_SECONDS",
        "2",
        "how often the cluster's free room is put in MUSTER_CLUSTERS for multi-cluster dispatch",
    ),
    Flag(
        "--evict-resend-seconds",
        "S",
        float,
        "MUSTER_EVICT_RESEND_SECONDS",
        "30",
        "a placement eviction the binder has not answered is asked for again after this, "
        "then twice as long each time, up to 5 minutes",
    ),
    ENDED_KEPT_FLAG,
    *BACKEND_FLAGS,
)
DESCRIPTION = "Place every pod of a gang at once on one cluster, or reject them together."


def main(argv: list[str]) -> int:
    """Run gangpermit until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, build=build)


def parse(argv: list[str]) -> tuple[ServiceConfig, ServiceMain]:
    """What `main(argv)` would run, without running it."""
    return parse_service(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, make=build)


def configs(argv: list[str]) -> tuple[ServiceConfig, GangPermitConfig]:
    """The service's and gangpermit's configuration from `argv` and the environment."""
    return parse_service(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, make=gang_config)


def build(args: argparse.Namespace, config: ServiceConfig) -> ServiceMain:
    gang = gang_config(args, config)
    return functools.partial(serve, config=gang, backend=backend_config(args))


def gang_config(args: argparse.Namespace, config: ServiceConfig) -> GangPermitConfig:
    if args.scoring not in SCORINGS:
        raise ValueError(f"--scoring must be one of {', '.join(SCORINGS)}, got {args.scoring!r}")
    return GangPermitConfig(
        cluster=config.cluster,
        gang_timeout_s=args.gang_timeout_seconds,
        scheduler_name=args.scheduler_name,
        scoring=cast(Scoring, args.scoring),
        preemption=args.placement_preemption,
        heartbeat_s=args.heartbeat_seconds,
        evict_resend_s=args.evict_resend_seconds,
        ended_kept_s=args.ended_kept_seconds,
    )


async def serve(
    bus: Bus, health: Health, *, config: GangPermitConfig, backend: BackendConfig
) -> None:
    """Place gangs on cluster `config.cluster`, simulated or Kubernetes (`backend`)."""
    async with (
        open_backend(backend, buckets=bus.kv, cluster=config.cluster) as opened,
        _node_warnings(opened, config) as warn,
    ):
        await run_gangpermit(bus, health, backend=opened.backend, config=config, warn=warn)


@contextlib.asynccontextmanager
async def _node_warnings(
    opened: OpenCluster, config: GangPermitConfig
) -> AsyncIterator[Warn | None]:
    """On Kubernetes, a Warning Event on each Node gang-permit refuses, reported by the
    scheduler as its pod Events are (None on the simulated cluster)."""
    instance = f"muster-gangpermit-{config.cluster}"
    async with event_recorder(opened, controller=config.scheduler_name, instance=instance) as rec:
        if rec is None:
            yield None
        else:
            yield lambda obj, problems: rec.record(obj, **rejected_event(obj, problems))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
