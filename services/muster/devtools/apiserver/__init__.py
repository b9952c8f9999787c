"""A Kubernetes API-server stand-in speaking the real REST and watch protocol over HTTP/1.1, so
the official `kubernetes` client runs unchanged against it in tests and benchmarks.

What it serves and how closely it follows the real server: docs in each module; the entry
points are `ApiServer` (asyncio) and `ThreadedApiServer` (a thread, for synchronous clients).
Run one by hand with `python -m muster.devtools.apiserver --port 8080`.
"""

from muster.devtools.apiserver.faults import Faults, Request, RequestLog
from muster.devtools.apiserver.resources import (
    ResourceType,
    autoscaling_resources,
    builtin_resources,
    default_resources,
    kueue_resources,
    podgroup_resources,
)
from muster.devtools.apiserver.server import ApiServer, ThreadedApiServer
from muster.devtools.apiserver.strategy_base import FeatureGates

__all__ = [
    "ApiServer",
    "Faults",
    "FeatureGates",
    "Request",
    "RequestLog",
    "ResourceType",
    "ThreadedApiServer",
    "autoscaling_resources",
    "builtin_resources",
    "default_resources",
    "kueue_resources",
    "podgroup_resources",
]
