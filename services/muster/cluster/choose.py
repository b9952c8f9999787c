"""Which cluster a per-cluster service (watcher, binder, gangpermit) works on: the simulated one
in NATS or a Kubernetes API server.

`BACKEND_FLAGS` (all three) and `STATUS_FLAGS` (the watcher, which writes Kueue statuses) are
service flags; `backend_config(args)` checks them once and raises ValueError naming the flag;
`open_backend` opens the chosen backend for the service's lifetime, with the Kueue status
writer when it is Kubernetes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Literal, NamedTuple, cast

import msgspec

from muster.api.wellknown import SCHEDULER_NAME
from muster.bus.kv import OpenBucket
from muster.bus.service import Flag
from muster.bus.supervision import supervised
from muster.cluster.backend import ClusterBackend
from muster.cluster.kube.settings import (
    KUEUE_VERSIONS,
    KubeConfig,
    StatusWriterSettings,
    WorkerSource,
)
from muster.cluster.sim.backend import SimBackend

if TYPE_CHECKING:
    from muster.api.resource import Resource
    from muster.cluster.kube.backend import KubeBackend
    from muster.cluster.kube.events import EventRecorder, EventSettings
    from muster.cluster.kube.status import StatusWriter

BackendKind = Literal["sim", "kube"]
BACKENDS: tuple[BackendKind, ...] = ("sim", "kube")
_STATUS_FLUSH_S = 2.0  # at shutdown, desired statuses get this long to be written


def on_off(text: str) -> bool:
    """ "on"/"off" (or true/false, 1/0, yes/no) as a bool; ValueError otherwise."""
    value = text.strip().lower()
    if value in ("on", "true", "1", "yes"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    raise ValueError(f"expected on or off, got {text!r}")


BACKEND_FLAGS = (
    Flag("--cluster-backend", "|".join(BACKENDS), str, "MUSTER_CLUSTER_BACKEND", "sim",
         "the cluster: simulated in NATS (sim) or a Kubernetes API server (kube)"),
    Flag("--kube-host", "URL", str, "MUSTER_KUBE_HOST", None,
         "kube: API server URL, instead of the kubeconfig's"),
    Flag("--kubeconfig", "FILE", str, "MUSTER_KUBECONFIG", None,
         "kube: kubeconfig file (default $KUBECONFIG, then ~/.kube/config)"),
    Flag("--kube-context", "NAME", str, "MUSTER_KUBE_CONTEXT", None,
         "kube: kubeconfig context (default its current one)"),
    Flag("--kube-in-cluster", "on|off", on_off, "MUSTER_KUBE_IN_CLUSTER", "off",
         "kube: authenticate as the pod's service account"),
    Flag("--kube-write-qps", "R", float, "MUSTER_KUBE_WRITE_QPS", "50",
         "kube: writes per second (create, update, bind, delete); 0 = unlimited"),
    Flag("--kube-write-burst", "N", int, "MUSTER_KUBE_WRITE_BURST", "100",
         "kube: writes allowed at once after a quiet spell"),
    Flag("--kueue-version", "|".join(KUEUE_VERSIONS), str, "MUSTER_KUEUE_VERSION", "v1beta1",
         "kube: the kueue.x-k8s.io version read and written"),
    Flag("--scheduler-name", "NAME", str, "MUSTER_SCHEDULER_NAME", SCHEDULER_NAME,
         "muster places the pods whose spec.schedulerName is NAME and leaves the others alone"),
    Flag("--multikueue-cluster", "NAME", str, "MUSTER_MULTIKUEUE_CLUSTER", None,
         "kube: serve worker cluster NAME (= --cluster) from the manager's side: the client "
         "flags reach the manager, the worker's API server is the one its MultiKueueCluster's "
         "kubeConfig names"),
    Flag("--multikueue-namespace", "NS", str, "MUSTER_MULTIKUEUE_NAMESPACE", "muster",
         "kube: the namespace of the Secrets MultiKueueClusters name (muster's own)"),
    Flag("--multikueue-refresh-seconds", "S", float, "MUSTER_MULTIKUEUE_REFRESH_SECONDS", "10",
         "kube: how often a worker's kubeconfig is read again (a change takes effect then)"),
)  # fmt: skip
STATUS_FLAGS = (
    Flag("--kube-status-qps", "R", float, "MUSTER_KUBE_STATUS_QPS", "20",
         "kube: status writes per second of Workloads and queues; 0 = unlimited"),
    Flag("--kube-status-burst", "N", int, "MUSTER_KUBE_STATUS_BURST", "40",
         "kube: status writes allowed at once after a quiet spell"),
)  # fmt: skip


class BackendConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The cluster backend a service opens; `kube` and `status` matter for "kube" only, and
    `worker` when the cluster is a worker served from the manager's side (`kube` then
    reaches the manager)."""

    kind: BackendKind = "sim"
    kube: KubeConfig = KubeConfig()
    status: StatusWriterSettings = StatusWriterSettings()
    worker: WorkerSource | None = None


class OpenCluster(NamedTuple):
    backend: ClusterBackend
    status: StatusWriter | None  # Kueue objects' status: on Kubernetes only


def _rate(qps: float, burst: int, *, names: tuple[str, str]) -> tuple[float, int]:
    """(qps, burst) when valid; ValueError naming the flag (`names`) that is out of range."""
    if qps < 0:
        raise ValueError(f"{names[0]} must be >= 0 (0 = unlimited), got {qps:g}")
    if burst < 1:
        raise ValueError(f"{names[1]} must be >= 1, got {burst}")
    return qps, burst


def backend_config(args: argparse.Namespace) -> BackendConfig:
    """The backend from `BACKEND_FLAGS` (and `STATUS_FLAGS`, when added); raises ValueError
    with a message naming the flag when a value is invalid."""
    if args.cluster_backend not in BACKENDS:
        raise ValueError(
            f"--cluster-backend must be one of {', '.join(BACKENDS)}, got {args.cluster_backend!r}"
        )
    if args.kueue_version not in KUEUE_VERSIONS:
        raise ValueError(
            f"--kueue-version must be one of {', '.join(KUEUE_VERSIONS)}, "
            f"got {args.kueue_version!r}"
        )
    if not args.scheduler_name:
        raise ValueError("--scheduler-name must not be empty")
    host = args.kube_host or ""
    if host and not host.startswith(("http://", "https://")):
        raise ValueError(f"--kube-host must be an http:// or https:// URL, got {host!r}")
    if args.kube_in_cluster and args.kubeconfig:
        raise ValueError("--kube-in-cluster and --kubeconfig cannot be combined")
    write_qps, write_burst = _rate(
        args.kube_write_qps, args.kube_write_burst, names=("--kube-write-qps", "--kube-write-burst")
    )
    status = StatusWriterSettings()
    if hasattr(args, "kube_status_qps"):
        qps, burst = _rate(
            args.kube_status_qps,
            args.kube_status_burst,
            names=("--kube-status-qps", "--kube-status-burst"),
        )
        status = msgspec.structs.replace(status, qps=qps, burst=burst)
    kube = KubeConfig(
        host=host,
        kubeconfig=args.kubeconfig or "",
        context=args.kube_context or "",
        in_cluster=args.kube_in_cluster,
        write_qps=write_qps,
        write_burst=write_burst,
        scheduler_name=args.scheduler_name,
        kueue_version=args.kueue_version,
    )
    problems = kube.problems()
    if problems:  # every field is checked above; this is a backstop
        raise ValueError("; ".join(problems))
    return BackendConfig(
        kind=cast(BackendKind, args.cluster_backend),
        kube=kube,
        status=status,
        worker=_worker_source(args),
    )


def _worker_source(args: argparse.Namespace) -> WorkerSource | None:
    """The worker served from the manager's side (`--multikueue-cluster`), checked."""
    name = args.multikueue_cluster or ""
    if not name:
        return None
    if args.cluster_backend != "kube":
        raise ValueError("--multikueue-cluster needs --cluster-backend kube")
    if name != args.cluster:
        raise ValueError(
            f"--multikueue-cluster {name!r} must be the cluster id (--cluster), "
            f"got {args.cluster!r}"
        )
    if not args.multikueue_namespace:
        raise ValueError("--multikueue-namespace must not be empty")
    if not args.multikueue_refresh_seconds > 0:
        raise ValueError(
            f"--multikueue-refresh-seconds must be > 0, got {args.multikueue_refresh_seconds:g}"
        )
    return WorkerSource(
        cluster=name,
        namespace=args.multikueue_namespace,
        refresh_s=args.multikueue_refresh_seconds,
    )


@contextlib.asynccontextmanager
async def open_backend(
    config: BackendConfig,
    *,
    buckets: OpenBucket,
    cluster: str,
) -> AsyncIterator[OpenCluster]:
    """The backend of `cluster` for the body: the simulated one in the service's own NATS
    key-value buckets (`buckets`: `Bus.kv`, writing through the bus's publisher), or the API server
    (ClusterError when no client configuration is found). On Kubernetes, statuses desired but
    not yet written get a short while at the end."""
    if config.kind == "sim":
        yield OpenCluster(await SimBackend.open(buckets, cluster=cluster), None)
        return
    # Imported here: the client library is loaded by services on Kubernetes only.
    from muster.cluster.kube.status import StatusWriter

    async with _kube_backend(config) as backend:
        status = StatusWriter(
            backend.transport,
            kueue_version=config.kube.kueue_version,
            settings=config.status,
            gang_api=backend.gang_api,
        )
        try:
            yield OpenCluster(backend, status)
        finally:
            with contextlib.suppress(TimeoutError):
                await status.flush(timeout_s=_STATUS_FLUSH_S)
            await status.close()


_EVENTS_FLUSH_S = 2.0  # at shutdown, Kubernetes Events not yet written get this long


@contextlib.asynccontextmanager
async def event_recorder(
    opened: OpenCluster,
    *,
    controller: str,
    instance: str,
    settings: EventSettings | None = None,
    lookup: dict[str, Resource] | None = None,
) -> AsyncIterator[EventRecorder | None]:
    """The Kubernetes Event recorder of a service on `opened` (None on the simulated cluster);
    what it still has to write gets a short while at the end."""
    if opened.status is None:
        yield None
        return
    # Imported here: the client library is loaded by services on Kubernetes only.
    from muster.cluster.kube.backend import KubeBackend
    from muster.cluster.kube.events import EventRecorder

    assert isinstance(opened.backend, KubeBackend)
    recorder = EventRecorder(
        opened.backend.transport,
        controller=controller,
        instance=instance,
        settings=settings,
        lookup=lookup,
    )
    try:
        yield recorder
    finally:
        await recorder.finish(flush_s=_EVENTS_FLUSH_S)


@contextlib.asynccontextmanager
async def _kube_backend(config: BackendConfig) -> AsyncIterator[KubeBackend]:
    """The API server's backend; for a worker served from the manager's side, the worker's,
    its client kept up to date from its MultiKueueCluster (`worker.WorkerLink`)."""
    from muster.cluster.kube.backend import KubeBackend
    from muster.cluster.kube.worker import WorkerLink

    if config.worker is None:
        backend = await KubeBackend.connect(config.kube)
        try:
            yield backend
        finally:
            await backend.close()
        return
    manager = await KubeBackend.connect(config.kube)
    worker = KubeBackend.unconnected(config.kube)
    link = WorkerLink(
        manager.transport, worker.transport, config.worker, version=config.kube.kueue_version
    )
    try:
        await link.refresh()
        refreshing = supervised(link.run(), name="worker-kubeconfig")
        try:
            yield worker
        finally:
            refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refreshing
    finally:
        await worker.close()
        await manager.close()
