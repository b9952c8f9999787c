"""`muster service admission` (or `python -m muster.admission`): flags → AdmissionConfig → run.

The common service flags plus `--shard I --shards N` (MUSTER_ADMISSION_SHARD,
MUSTER_ADMISSION_SHARDS) and `--lease-ttl-seconds` (MUSTER_ADMISSION_LEASE_TTL_SECONDS).
"""

from __future__ import annotations

import argparse
import os
import sys

from muster.admission.service import AdmissionConfig, run_admission
from muster.bus.connection import Bus
from muster.bus.service import (
    Health,
    ServiceConfig,
    add_common_flags,
    config_from_args,
    run_service,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster service admission",
        description="Kueue's admission for a shard of cohort trees: consumes workload and "
        "configuration events, publishes admissions, pending reasons and preemptions.",
    )
    add_common_flags(parser)
    group = parser.add_argument_group("admission options")
    env = os.environ.get
    group.add_argument(
        "--shard",
        metavar="I",
        type=int,
        default=env("MUSTER_ADMISSION_SHARD") or "0",
        help="this replica's shard index, 0..N-1 (MUSTER_ADMISSION_SHARD, default %(default)s)",
    )
    group.add_argument(
        "--shards",
        metavar="N",
        type=int,
        default=env("MUSTER_ADMISSION_SHARDS") or "1",
        help="how many shards the cohort trees are split into "
        "(MUSTER_ADMISSION_SHARDS, default %(default)s)",
    )
    group.add_argument(
        "--lease-ttl-seconds",
        metavar="S",
        type=float,
        default=env("MUSTER_ADMISSION_LEASE_TTL_SECONDS") or "5",
        help="how long a dead replica's shard lease outlives it; renewed every second "
        "(MUSTER_ADMISSION_LEASE_TTL_SECONDS, default %(default)s)",
    )
    return parser


def configs(argv: list[str]) -> tuple[ServiceConfig, AdmissionConfig]:
    """The service and admission configs the flags ask for; exits 2 on a bad flag."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        service = config_from_args(args, "admission")
        config = AdmissionConfig(
            shard=args.shard,
            shards=args.shards,
            cluster=service.cluster,
            lease_ttl_s=args.lease_ttl_seconds,
            lease_renew_s=min(1.0, args.lease_ttl_seconds / 3),
        )
    except ValueError as exc:
        parser.error(str(exc))  # exits 2
    return service, config


def main(argv: list[str] | None = None) -> int:
    """Run one admission replica until SIGTERM; the exit status (2 for bad flags)."""
    service, config = configs(sys.argv[1:] if argv is None else argv)

    async def body(bus: Bus, health: Health) -> None:
        await run_admission(bus, health, config)

    return run_service(service, body)


if __name__ == "__main__":
    sys.exit(main())
