"""Starting and stopping a Job or JobSet as Kueue does: one write that unsuspends it with its
podsets' placement (and, routed, their requests), one that suspends it with its templates
put back as its owner wrote them. What each write holds is `jobs` and `jobsets` (pure)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from muster.api.resource import Resource
from muster.cluster.backend import PodSetStart
from muster.cluster.errors import ClusterError, InvalidObjectError, RequestsRefusedError
from muster.cluster.kube import jobs, jobsets
from muster.cluster.kube.api_objects import STRICT_QUERY, ApiObjects
from muster.cluster.kube.overheads import runtime_overheads
from muster.cluster.kube.resize import ResizeError
from muster.cluster.kube.resources import JOBS, JOBSETS
from muster.cluster.kube.transport import MERGE_PATCH

log = logging.getLogger(__name__)


async def start_jobset(
    api: ApiObjects,
    jobset: Mapping[str, Any],
    pod_sets: Sequence[PodSetStart],
    *,
    workload: str,
    admission: int,
) -> None:
    """Unsuspend `jobset` with its podsets' placement (`jobsets.started_jobset`), one write;
    its controller passes them on to its Jobs."""
    js_name, namespace, path, who = _where(JOBSETS, jobset)
    current: Mapping[str, Any] | None = jobset
    classes = await runtime_overheads(api, jobset, pod_sets)

    async def start() -> None:
        nonlocal current
        fresh = current if current is not None else await api.get(JOBSETS, js_name, namespace)
        current = None  # a retry reads again
        try:
            started = jobsets.started_jobset(
                fresh,
                pod_sets,
                workload=workload,
                admission=admission,
                runtime_classes=classes,
            )
        except ResizeError as err:
            message = f"its pod templates cannot ask for the admitted requests: {err}"
            raise RequestsRefusedError(who, message) from None
        if started is not None:
            await api.transport.checked("PUT", path, obj=who, query=STRICT_QUERY, body=started)

    await api.retrying(start)


async def stop_jobset(api: ApiObjects, jobset: Mapping[str, Any]) -> None:
    """Suspend `jobset`, its templates put back as its owner wrote them, in one write."""
    js_name, namespace, path, who = _where(JOBSETS, jobset)

    async def stop() -> None:
        suspended = jobsets.suspended_jobset(await api.get(JOBSETS, js_name, namespace))
        if suspended is not None:
            await api.transport.checked("PUT", path, obj=who, query=STRICT_QUERY, body=suspended)

    await api.retrying(stop)


async def start_job(
    api: ApiObjects,
    job: Mapping[str, Any],
    pod_sets: Sequence[PodSetStart],
    *,
    workload: str,
    admission: int,
) -> None:
    """Unsuspend `job` with its podsets' placement and requests (`jobs.started_job`), one
    write; a refused change of its resources is a RequestsRefusedError."""
    job_name, namespace, path, who = _where(JOBS, job)
    current: Mapping[str, Any] | None = job
    classes = await runtime_overheads(api, job, pod_sets)

    async def start() -> None:
        nonlocal current
        fresh = current if current is not None else await api.get(JOBS, job_name, namespace)
        current = None  # a retry reads again
        if jobs.is_suspended(fresh) and (fresh.get("status") or {}).get("startTime"):
            fresh = await _clear_start_time(api, job_name, namespace)  # else no template change
        try:
            started = jobs.started_job(
                fresh,
                pod_sets,
                workload=workload,
                admission=admission,
                runtime_classes=classes,
            )
        except ResizeError as err:
            message = f"its pod template cannot ask for the admitted requests: {err}"
            raise RequestsRefusedError(who, message) from None
        if started is None:
            return
        # One write: the new requests and the unsuspend together (KEP-5440's advice), so
        # a refusal leaves the Job suspended as it was, never running with other requests.
        try:
            await api.transport.checked("PUT", path, obj=who, query=STRICT_QUERY, body=started)
        except ClusterError as err:
            refused = isinstance(err, InvalidObjectError) or err.reason == "Forbidden"
            if not refused or not jobs.resources_changed(fresh, started):
                raise
            message = f"the API server refused to change its pod template's resources: {err}"
            raise RequestsRefusedError(who, message) from err

    await api.retrying(start)


async def stop_job(api: ApiObjects, job: Mapping[str, Any]) -> None:
    """Suspend `job`, then put its pod template back as its owner wrote it (once its active
    pods are gone, when its resources change)."""
    job_name, namespace, path, who = _where(JOBS, job)

    async def stop() -> None:
        current = await api.get(JOBS, job_name, namespace)
        suspended = jobs.suspended_job(current)
        if suspended is not None:
            current = await api.transport.checked(
                "PUT", path, obj=who, query=STRICT_QUERY, body=suspended
            )
        if (current.get("status") or {}).get("startTime"):
            current = await _clear_start_time(api, job_name, namespace)
        restored = jobs.restored_job(current)
        if restored is None:
            return
        try:
            await api.transport.checked("PUT", path, obj=who, query=STRICT_QUERY, body=restored)
        except InvalidObjectError as err:
            active = (current.get("status") or {}).get("active") or 0
            if active and jobs.resources_changed(current, restored):
                # Its resources may change once the Job controller has removed its pods
                # (KEP-5440): until then the Job holds its quota, as Kueue's does.
                raise ClusterError(
                    who,
                    "Invalid",
                    f"waiting for its {active} active pods to stop",
                    temporary=True,
                ) from err
            log.warning("cannot restore the pod template of %s: %s", who, err)

    await api.retrying(stop)


async def _clear_start_time(api: ApiObjects, job_name: str, namespace: str) -> dict[str, Any]:
    """Clear a suspended Job's status.startTime, as Kueue does so its template may change."""
    job: dict[str, Any] = await api.transport.checked(
        "PATCH",
        JOBS.object_path(job_name, namespace, "status"),
        obj=JOBS.describe(job_name, namespace),
        body={"status": {"startTime": None}},
        content_type=MERGE_PATCH,
    )
    return job


def _where(resource: Resource, owner: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """`owner`'s name and namespace, its object path, and how an error names it: what starting
    or stopping a Job or JobSet opens with."""
    meta = owner.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    path, who = resource.object_path(name, namespace), resource.describe(name, namespace)
    return name, namespace, path, who
