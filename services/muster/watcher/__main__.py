"""`muster service watcher`: publish what one cluster's objects mean (docs/services.md)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from typing import TYPE_CHECKING

import msgspec

from muster.api import kueue_config_from_file
from muster.api.model import KueueConfig
from muster.bus import Bus
from muster.bus.service import (
    Flag,
    Health,
    ServiceConfig,
    ServiceMain,
    parse_service,
    service_main,
)
from muster.bus.supervision import SupervisedGroup
from muster.checks.registry import CONTROLLERS, controller_names
from muster.cluster.choose import (
    BACKEND_FLAGS,
    STATUS_FLAGS,
    BackendConfig,
    OpenCluster,
    backend_config,
    event_recorder,
    open_backend,
)
from muster.watcher.kube_events import ADMISSION
from muster.watcher.service import WatcherConfig, run_watcher

if TYPE_CHECKING:
    from muster.checks.runner import NoteSink
    from muster.cluster.kube.events import EventRecorder


NAME = "watcher"
DESCRIPTION = (
    "Watch one cluster and publish submitted, config and pod events; on Kubernetes, also "
    "create queued Jobs' Kueue Workloads, write Kueue statuses and run admission check "
    "controllers."
)
KUBE_WATCHER_FLAGS = (
    Flag("--check-controllers", "NAMES", str, "MUSTER_CHECK_CONTROLLERS", ",".join(CONTROLLERS),
         "kube: the admission check controllers to run, comma-separated (none: none), from: "
         + ", ".join(CONTROLLERS)),
    Flag("--kube-event-qps", "R", float, "MUSTER_KUBE_EVENT_QPS", "10",
         "kube: Kubernetes Events written per second (repeats are counted, not written); "
         "0 = unlimited"),
    Flag("--kube-event-burst", "N", int, "MUSTER_KUBE_EVENT_BURST", "50",
         "kube: Events written at once after a quiet spell"),
    Flag("--kueue-config", "FILE", str, "MUSTER_KUEUE_CONFIG", None,
         "kube: Kueue Configuration (admission's): with waitForPodsReady on, Workloads carry "
         "the PodsReady condition"),
    Flag("--cluster-lost-seconds", "S", float, "MUSTER_CLUSTER_LOST_SECONDS", "10",
         "kube: a MultiKueueCluster whose services have not reported for this long is not "
         "Active (as admission's flag of that name)"),
)  # fmt: skip
FLAGS = (*BACKEND_FLAGS, *STATUS_FLAGS, *KUBE_WATCHER_FLAGS)


def main(argv: list[str]) -> int:
    """Run the watcher until SIGTERM or SIGINT; the exit status (2 for bad flags)."""
    return service_main(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, build=build)


def parse(argv: list[str]) -> tuple[ServiceConfig, ServiceMain]:
    """What `main(argv)` would run, without running it."""
    return parse_service(argv, name=NAME, description=DESCRIPTION, flags=FLAGS, make=build)


class KubeWatcherConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the watcher does on Kubernetes besides watching: its Events' write rate."""

    event_qps: float = 10.0
    event_burst: int = 50


def build(args: argparse.Namespace, config: ServiceConfig) -> ServiceMain:
    backend = backend_config(args)
    if not args.cluster_lost_seconds > 0:
        raise ValueError(
            f"--cluster-lost-seconds must be > 0 seconds, got {args.cluster_lost_seconds:g}"
        )
    kueue = _kueue_config(args.kueue_config)
    watcher = WatcherConfig(
        cluster=config.cluster,
        kueue_version=backend.kube.kueue_version,
        check_controllers=controller_names(args.check_controllers),
        cluster_lost_s=args.cluster_lost_seconds,
        pods_ready_condition=kueue.wait_for_pods_ready.enable,
        granular_reasons=kueue.granular_pending_reasons,
        requeuing=kueue.wait_for_pods_ready.requeuing_strategy,
        admission_fair_sharing=kueue.admission_fair_sharing,
        reclaimable_pods=kueue.reclaimable_pods,
    )
    if args.kube_event_qps < 0:
        raise ValueError(
            f"--kube-event-qps must be >= 0 (0 = unlimited), got {args.kube_event_qps:g}"
        )
    if args.kube_event_burst < 1:
        raise ValueError(f"--kube-event-burst must be >= 1, got {args.kube_event_burst}")
    kube = KubeWatcherConfig(event_qps=args.kube_event_qps, event_burst=args.kube_event_burst)
    return functools.partial(serve, config=watcher, backend=backend, kube=kube)


def _kueue_config(path: str | None) -> KueueConfig:
    """Kueue's Configuration at `path` (no file: Kueue's defaults): what the statuses written
    follow of it (waitForPodsReady and its back-off, the UnadmittedWorkloadsObservability
    gate, admissionFairSharing)."""
    if not path:
        return KueueConfig()
    kueue, errors = kueue_config_from_file(path)
    if kueue is None:
        raise ValueError("; ".join(str(e) for e in errors))
    return kueue


async def serve(
    bus: Bus,
    health: Health,
    *,
    config: WatcherConfig,
    backend: BackendConfig,
    kube: KubeWatcherConfig | None = None,
) -> None:
    """Watch cluster `config.cluster`, simulated or Kubernetes (`backend`); on Kubernetes,
    record Kubernetes Events and run the admission check controllers beside."""
    async with (
        open_backend(backend, buckets=bus.kv, cluster=config.cluster) as opened,
        _recorder(opened, config, kube or KubeWatcherConfig()) as events,
        SupervisedGroup() as tasks,
    ):
        if events is not None and config.check_controllers:
            tasks.create_task(_run_checks(opened, backend, config, events), name="watcher-checks")
        await run_watcher(
            bus, health, backend=opened.backend, config=config, kueue=opened.status, events=events
        )


def _recorder(
    opened: OpenCluster, config: WatcherConfig, kube: KubeWatcherConfig
) -> contextlib.AbstractAsyncContextManager[EventRecorder | None]:
    """The Kubernetes Event recorder of workloads' and Jobs' Events (None on the simulated
    cluster)."""
    if opened.status is None:
        return event_recorder(opened, controller=ADMISSION, instance="")
    # Imported here: the client library is loaded by services on Kubernetes only.
    from muster.cluster.kube.events import EventSettings
    from muster.cluster.kube.resources import JOBS, JOBSETS, kueue_resources

    return event_recorder(
        opened,
        controller=ADMISSION,
        instance=f"muster-watcher-{config.cluster}",
        settings=EventSettings(qps=kube.event_qps, burst=kube.event_burst),
        lookup={
            "Workload": kueue_resources(config.kueue_version)["Workload"],
            "Job": JOBS,
            "JobSet": JOBSETS,
        },
    )


async def _run_checks(
    opened: OpenCluster, backend: BackendConfig, config: WatcherConfig, notes: NoteSink
) -> None:
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
        notes=notes,
    )
    await runner.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
