"""`muster service preemption` (or `python -m muster.preemption`): flags → config → run.

The common service flags plus `--evict-grace-seconds` (MUSTER_EVICT_GRACE_SECONDS, default 30:
how long to wait for `eviction_completed` before asking again) and `--max-attempts`
(MUSTER_EVICT_MAX_ATTEMPTS, default 10). The common `--grace-seconds` keeps its meaning for
every service: the shutdown grace period.
"""

from __future__ import annotations

import sys

from muster.bus.connection import Bus
from muster.bus.service import Flag, Health, ServiceConfig, parse_service, run_service
from muster.preemption.service import PreemptionConfig, run_preemption

NAME = "preemption"
DESCRIPTION = (
    "Executes evictions: sends cmd.evict to the victim's cluster and re-sends it until the "
    "binder reports eviction_completed."
)
FLAGS = (
    Flag("--evict-grace-seconds", "S", float, "MUSTER_EVICT_GRACE_SECONDS", "30",
         "re-send cmd.evict when eviction_completed has not come this long after"),
    Flag("--max-attempts", "N", int, "MUSTER_EVICT_MAX_ATTEMPTS", "10",
         "give up (error log, DLQ copy) after this many cmd.evict"),
)  # fmt: skip


def configs(argv: list[str]) -> tuple[ServiceConfig, PreemptionConfig]:
    """The service and preemption configs the flags ask for; exits 2 on a bad flag."""
    return parse_service(
        argv,
        name=NAME,
        description=DESCRIPTION,
        flags=FLAGS,
        make=lambda args, _: PreemptionConfig(
            resend_s=args.evict_grace_seconds, max_attempts=args.max_attempts
        ),
    )


def main(argv: list[str] | None = None) -> int:
    """Run the preemption service until SIGTERM; the exit status (2 for bad flags)."""
    service, config = configs(sys.argv[1:] if argv is None else argv)

    async def body(bus: Bus, health: Health) -> None:
        await run_preemption(bus, health, config)

    return run_service(service, body)


if __name__ == "__main__":
    sys.exit(main())
