"""`muster service sim-cluster`: the kubelet and garbage collector of a simulated cluster.

Runs the bound pods in KV bucket `MUSTER_SIM_<cluster>` for their `muster.dev/run-seconds`
divided by `--speed`, counted from their start (or, with `--run-from created`, from their
creation: see `Kubelet`), and deletes the pods of each deleted workload (`GarbageCollector`,
fed every cluster's `workload.deleted` from MUSTER_EVENTS). Takes every service's common flags
(`muster.bus.service`).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import AsyncIterator

from muster.bus import Bus
from muster.bus.service import Flag, Health, ServiceConfig, ServiceMain, service_main
from muster.bus.subjects import workload_filters
from muster.bus.supervision import SupervisedGroup
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.clock import Clock, WallClock
from muster.cluster.sim.collector import Deletion, GarbageCollector
from muster.cluster.sim.kubelet import RUN_FROM, STARTED, Kubelet
from muster.cluster.sim.store import SimStore

NAME = "sim-cluster"


def main(argv: list[str]) -> int:
    """Run the sim kubelet until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(
        argv,
        name=NAME,
        description="Run the pods of a simulated cluster (the sim kubelet), and collect those "
        "of deleted workloads.",
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
    """Open the cluster's store and run its kubelet and garbage collector until cancelled."""
    clock = clock or WallClock()
    store = await SimStore.open(bus.kv, cluster=cluster)
    collector = GarbageCollector(SimBackend(store, clock=clock))
    kubelet = Kubelet(store, clock=clock, speed=speed, run_from=run_from, on_pod=collector.seen)
    health.ready()
    async with SupervisedGroup() as tasks:
        tasks.create_task(kubelet.run(), name="kubelet")
        tasks.create_task(collector.run(deletions(bus)), name="garbage-collector")


async def deletions(bus: Bus) -> AsyncIterator[Deletion]:
    """Every cluster's `workload.deleted`, from the start of MUSTER_EVENTS, then as stored."""
    async for env in bus.replay(workload_filters("*", "deleted"), follow=True):
        yield Deletion(env.workload, env.sequence)


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
