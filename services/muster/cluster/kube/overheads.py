"""The RuntimeClass overheads a routed podset's pods pay, read from the API server: `resize`
counts them in the requests those pods get."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from muster.cluster.backend import PodSetStart
from muster.cluster.errors import ClusterError, RequestsRefusedError
from muster.cluster.kube.api_objects import ApiObjects
from muster.cluster.kube.resize import NO_RUNTIME_CLASSES, RuntimeOverheads, runtime_class_names
from muster.cluster.kube.resources import RUNTIME_CLASSES


async def runtime_overheads(
    api: ApiObjects, obj: Mapping[str, Any], pod_sets: Sequence[PodSetStart]
) -> RuntimeOverheads:
    """The `overhead.podFixed` of each RuntimeClass the pod templates of `obj` (a Job,
    JobSet or Kueue Workload) name, when a podset was routed (`resize` counts it in the
    requests its pods get); one a cluster does not have is left out (`resize` says so).
    RequestsRefusedError when the API server refuses the read."""
    if not any(ps.routed for ps in pod_sets):
        return NO_RUNTIME_CLASSES
    found: dict[str, Mapping[str, Any]] = {}
    for name in sorted(runtime_class_names(obj)):
        try:
            rc = await api.get_or_none(RUNTIME_CLASSES, name)
        except ClusterError as err:
            if err.temporary:
                raise
            # Refused (a ClusterRole without the rule): the route is not taken, and the
            # workload runs as written on its declared queue, rather than dead-lettered.
            message = f"its overhead, for the routed requests, cannot be read: {err.message}"
            raise RequestsRefusedError(err.obj, message) from err
        if rc is not None:
            fixed = (rc.get("overhead") or {}).get("podFixed")
            found[name] = fixed if isinstance(fixed, dict) else {}
    return found
