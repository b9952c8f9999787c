"""`muster service sim-cluster`: the kubelet of a simulated cluster, as a service.

Runs the bound pods in KV bucket `MUSTER_SIM_<cluster>` for their `muster.dev/run-seconds`
divided by `--speed`, counted from their start (or, with `--run-from created`, from their
creation: see `Kubelet`). Takes every service's common flags (`muster.bus.service`).
"""

from __future__ import annotations

import argparse
import functools

from muster.bus import Bus
from muster.bus.service import Flag, Health, ServiceConfig, ServiceMain, service_main
from muster.cluster.sim.clock import Clock, WallClock
from muster.cluster.sim.kubelet import RUN_FROM, STARTED, Kubelet
from muster.cluster.sim.store import SimStore

NAME = "sim-cluster"


def main(argv: list[str]) -> int:
    """Run the sim kubelet until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(
        argv,
        name=NAME,
        description="Run the pods of a simulated cluster (the sim kubelet).",
        flags=(
            Flag(
                "--speed",
                "X",
                float,
                "MUSTER_SIM_SPEED",
                "1",
                "run pods X times faster than their muster.dev/run-seconds",
            ),
            Flag(
                "--run-from",
                "WHEN",
                str,
                "MUSTER_SIM_RUN_FROM",
                STARTED,
                f"count a pod's run time from when it is {' or '.join(RUN_FROM)}",
            ),
        ),
        build=build,
    )


def build(args: argparse.Namespace, config: ServiceConfig) -> ServiceMain:
    if not args.speed > 0:
        raise ValueError(f"--speed must be > 0, got {args.speed:g}")
    if args.run_from not in RUN_FROM:
        raise ValueError(f"--run-from must be one of {', '.join(RUN_FROM)}, got {args.run_from!r}")
    return functools.partial(
        serve, cluster=config.cluster, speed=args.speed, run_from=args.run_from
    )


async def serve(
    bus: Bus,
    health: Health,
    *,
    cluster: str,
    speed: float,
    run_from: str = STARTED,
    clock: Clock | None = None,
) -> None:
    """Open the cluster's store and run its kubelet until cancelled."""
    store = await SimStore.open(bus.kv, cluster=cluster)
    kubelet = Kubelet(store, clock=clock or WallClock(), speed=speed, run_from=run_from)
    health.ready()
    await kubelet.run()


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
