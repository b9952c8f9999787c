"""`muster service preemption` (or `python -m muster.preemption`): flags → config → run.

The common service flags plus `--evict-grace-seconds` (MUSTER_EVICT_GRACE_SECONDS, default 30:
how long to wait for `eviction_completed` before asking again) and `--max-attempts`
(MUSTER_EVICT_MAX_ATTEMPTS, default 10). The common `--grace-seconds` keeps its meaning for
every service: the shutdown grace period.
"""

from __future__ import annotations

import argparse
import os
import sys

from muster.bus.connection import Bus
from muster.bus.service import (
    Health,
    ServiceConfig,
    add_common_flags,
    config_from_args,
    run_service,
)
from muster.preemption.service import PreemptionConfig, run_preemption


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster service preemption",
        description="Executes evictions: sends cmd.evict to the victim's cluster and re-sends "
        "it until the binder reports eviction_completed.",
    )
    add_common_flags(parser)
    group = parser.add_argument_group("preemption options")
    env = os.environ.get
    group.add_argument(
        "--evict-grace-seconds",
        metavar="S",
        type=float,
        default=env("MUSTER_EVICT_GRACE_SECONDS") or "30",
        help="re-send cmd.evict when eviction_completed has not come this long after "
        "(MUSTER_EVICT_GRACE_SECONDS, default %(default)s)",
    )
    group.add_argument(
        "--max-attempts",
        metavar="N",
        type=int,
        default=env("MUSTER_EVICT_MAX_ATTEMPTS") or "10",
        help="give up (error log, DLQ copy) after this many cmd.evict "
        "(MUSTER_EVICT_MAX_ATTEMPTS, default %(default)s)",
    )
    return parser


def configs(argv: list[str]) -> tuple[ServiceConfig, PreemptionConfig]:
    """The service and preemption configs the flags ask for; exits 2 on a bad flag."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        service = config_from_args(args, "preemption")
        config = PreemptionConfig(resend_s=args.evict_grace_seconds, max_attempts=args.max_attempts)
    except ValueError as exc:
        parser.error(str(exc))  # exits 2
    return service, config


def main(argv: list[str] | None = None) -> int:
    """Run the preemption service until SIGTERM; the exit status (2 for bad flags)."""
    service, config = configs(sys.argv[1:] if argv is None else argv)

    async def body(bus: Bus, health: Health) -> None:
        await run_preemption(bus, health, config)

    return run_service(service, body)


if __name__ == "__main__":
    sys.exit(main())
