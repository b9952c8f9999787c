"""muster.cluster.kube: the ClusterBackend of a real cluster, on the official `kubernetes`
asyncio client (`kubernetes.aio`).

`KubeBackend` (watch, start/bind/stop, objects) from a `KubeConfig`; `StatusWriter` keeps the
status of Kueue objects up to date and creates the Kueue Workloads of queued Jobs. How it maps
onto the API server: `docs/kubernetes.md`.
"""

from muster.cluster.kube.backend import KubeBackend
from muster.cluster.kube.config import KubeConfig, api_client
from muster.cluster.kube.informer import SEQ_BITS, WatchSettings, floor_of
from muster.cluster.kube.status import (
    ObjectRef,
    StatusWriter,
    StatusWriterSettings,
    StatusWriterStats,
    workload_manifest,
)
from muster.cluster.kube.transport import Backoff, Transport

__all__ = [
    "SEQ_BITS",
    "Backoff",
    "KubeBackend",
    "KubeConfig",
    "ObjectRef",
    "StatusWriter",
    "StatusWriterSettings",
    "StatusWriterStats",
    "Transport",
    "WatchSettings",
    "api_client",
    "floor_of",
    "workload_manifest",
]
