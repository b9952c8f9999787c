"""`muster service sim-cluster`: the kubelet and garbage collector of a simulated cluster.

Runs the bound pods in KV bucket `MUSTER_SIM_<cluster>` for their `muster.dev/run-seconds`
divided by `--speed`, counted from their start (or, with `--run-from created`, from their
creation: see `Kubelet`), deletes the pods of each deleted workload (`GarbageCollector`,
fed every cluster's `workload.deleted` from MUSTER_EVENTS), and prunes the tombstones of deleted
pods no reader needs (`tombstones.py`). Takes every service's common flags
(`muster.bus.service`).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import AsyncIterator
from typing import NoReturn

from muster.bus import Bus
from muster.bus.buckets import WATCHER_BUCKET
from muster.bus.service import Flag, Health, ServiceConfig, ServiceMain, service_main
from muster.bus.subjects import workload_filters
from muster.bus.supervision import SupervisedGroup
from muster.cluster.keys import bucket_name
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.clock import Clock, WallClock
from muster.cluster.sim.collector import Deletion, GarbageCollector
from muster.cluster.sim.kubelet import RUN_FROM, STARTED, Kubelet
from muster.cluster.sim.store import SimStore
from muster.cluster.sim.tombstones import TOMBSTONES_KEPT_S, prune_forever

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
                "--pod-tombstones-kept-seconds",
                "S",
                float,
                "MUSTER_SIM_POD_TOMBSTONES_KEPT_SECONDS",
                f"{TOMBSTONES_KEPT_S:g}",
                "how long a deleted pod's tombstone stays, and until the cluster's watcher has "
                "read it (a watch resumed from before its deletion shows it); pruned every "
                "tenth of that, 10 s to 10 min",
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
    if not args.pod_tombstones_kept_seconds >= 0:
        raise ValueError(
            f"--pod-tombstones-kept-seconds must be >= 0, got {args.pod_tombstones_kept_seconds:g}"
        )
    return functools.partial(
        serve,
        cluster=config.cluster,
        speed=args.speed,
        run_from=args.run_from,
        tombstones_kept_s=args.pod_tombstones_kept_seconds,
    )


async def serve(
    bus: Bus,
    health: Health,
    *,
    cluster: str,
    speed: float,
    run_from: str = STARTED,
    clock: Clock | None = None,
    tombstones_kept_s: float = TOMBSTONES_KEPT_S,
    prune_every_s: float | None = None,
) -> None:
    """Open the cluster's store and run its kubelet, garbage collector and tombstone pruner
    until cancelled."""
    clock = clock or WallClock()
    store = await SimStore.open(bus.kv, cluster=cluster)
    collector = GarbageCollector(SimBackend(store, clock=clock))
    kubelet = Kubelet(store, clock=clock, speed=speed, run_from=run_from, on_pod=collector.seen)
    health.ready()
    async with SupervisedGroup() as tasks:
        tasks.create_task(kubelet.run(), name="kubelet")
        tasks.create_task(collector.run(deletions(bus)), name="garbage-collector")
        pruning = pruner(bus, cluster, kept_s=tombstones_kept_s, every_s=prune_every_s)
        tasks.create_task(pruning, name="tombstone-pruner")


async def pruner(bus: Bus, cluster: str, *, kept_s: float, every_s: float | None) -> NoReturn:
    """The tombstone pruner, its buckets opened here: a NATS user of before it (which may not
    read MUSTER_WATCHER) holds up only the pruning, never the kubelet."""
    pods, watcher = await bus.kv(bucket_name(cluster)), await bus.kv(WATCHER_BUCKET)
    await prune_forever(pods, watcher, cluster, kept_s=kept_s, every_s=every_s)


async def deletions(bus: Bus) -> AsyncIterator[Deletion]:
    """Every cluster's `workload.deleted`, from the start of MUSTER_EVENTS, then as stored."""
    async for env in bus.replay(workload_filters("*", "deleted"), follow=True):
        yield Deletion(env.workload, env.sequence)


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
