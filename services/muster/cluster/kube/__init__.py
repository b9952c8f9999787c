"""muster.cluster.kube: the ClusterBackend of a real cluster, on the official `kubernetes`
asyncio client (`kubernetes.aio`).

`KubeBackend` (watch, start/bind/stop, objects) from a `KubeConfig`; `StatusWriter` keeps the
status of Kueue objects up to date and creates the Kueue Workloads of queued Jobs. How it maps
onto the API server: `docs/kubernetes.md`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from muster.cluster.kube.backend import KubeBackend
    from muster.cluster.kube.config import api_client
    from muster.cluster.kube.informer import SEQ_BITS, floor_of
    from muster.cluster.kube.resources import ObjectRef
    from muster.cluster.kube.retry import Backoff
    from muster.cluster.kube.settings import KubeConfig, StatusWriterSettings, WatchSettings
    from muster.cluster.kube.status import (
        StatusWriter,
        StatusWriterStats,
        workload_manifest,
    )
    from muster.cluster.kube.transport import Transport

# Each name is imported on first use (PEP 562): the official client takes a few tenths of a
# second to import, which every service on the simulated cluster would otherwise pay.
_MODULE_OF = {
    "KubeBackend": "backend",
    "KubeConfig": "settings",
    "api_client": "config",
    "SEQ_BITS": "informer",
    "WatchSettings": "settings",
    "floor_of": "informer",
    "ObjectRef": "resources",
    "StatusWriter": "status",
    "StatusWriterSettings": "settings",
    "StatusWriterStats": "status",
    "workload_manifest": "status",
    "Backoff": "retry",
    "Transport": "transport",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


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
