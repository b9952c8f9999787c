"""Starting and stopping a Job or JobSet as Kueue does: one write that unsuspends it with its
podsets' placement (and, routed, their requests), one that suspends it with its templates
put back as its owner wrote them. What each write holds is `jobs` and `jobsets` (pure)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

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


class OwnerKind(NamedTuple):
    """How a Job or a JobSet is started: what differs between the two, the rest is
    `start_owner`'s."""

    resource: Resource
    # The object unsuspended with its podsets' placement, None when started already
    # (`jobs.started_job`, `jobsets.started_jobset`); raises ResizeError.
    started: Callable[..., dict[str, Any] | None]
    templates: str  # how an error names what cannot ask for the admitted requests
    # A Job's status.startTime is cleared first (as Kueue does), else no template changes.
    clears_start_time: bool
    # Whether a write the API server refuses changed its resources: refused so, the start is
    # a RequestsRefusedError (KEP-5440). None: any refusal is told as it came.
    resources_changed: Callable[[Mapping[str, Any], Mapping[str, Any]], bool] | None


JOB = OwnerKind(
    resource=JOBS,
    started=jobs.started_job,
    templates="its pod template",
    clears_start_time=True,
    resources_changed=jobs.resources_changed,
)
# Its controller passes what its templates were given on to its Jobs.
JOBSET = OwnerKind(
    resource=JOBSETS,
    started=jobsets.started_jobset,
    templates="its pod templates",
    clears_start_time=False,
    resources_changed=None,
)


async def start_owner(
    api: ApiObjects,
    kind: OwnerKind,
    owner: Mapping[str, Any],
    pod_sets: Sequence[PodSetStart],
    *,
    workload: str,
    admission: int,
) -> None:
    """Unsuspend `owner` (a Job or JobSet, as `kind` says) with its podsets' placement and,
    routed, their requests, in one write; templates that cannot ask for the admitted requests,
    or a write refused for changing them, are a RequestsRefusedError. A retry reads it again."""
    name, namespace, path, who = _where(kind.resource, owner)
    current: Mapping[str, Any] | None = owner
    classes = await runtime_overheads(api, owner, pod_sets)

    async def start() -> None:
        nonlocal current
        fresh = current if current is not None else await api.get(kind.resource, name, namespace)
        current = None  # a retry reads again
        if (
            kind.clears_start_time
            and jobs.is_suspended(fresh)
            and (fresh.get("status") or {}).get("startTime")
        ):
            fresh = await _clear_start_time(api, name, namespace)  # else no template change
        try:
            started = kind.started(
                fresh, pod_sets, workload=workload, admission=admission, runtime_classes=classes
            )
        except ResizeError as err:
            message = f"{kind.templates} cannot ask for the admitted requests: {err}"
            raise RequestsRefusedError(who, message) from None
        if started is None:
            return
        # One write: the new requests and the unsuspend together (KEP-5440's advice), so
        # a refusal leaves it suspended as it was, never running with other requests.
        try:
            await api.transport.checked("PUT", path, obj=who, query=STRICT_QUERY, body=started)
        except ClusterError as err:
            refused = isinstance(err, InvalidObjectError) or err.reason == "Forbidden"
            changed = kind.resources_changed
            if not refused or changed is None or not changed(fresh, started):
                raise
            whose = kind.templates + ("'" if kind.templates.endswith("s") else "'s")
            message = f"the API server refused to change {whose} resources: {err}"
            raise RequestsRefusedError(who, message) from err

    await api.retrying(start)


async def stop_jobset(api: ApiObjects, jobset: Mapping[str, Any]) -> None:
    """Suspend `jobset`, its templates put back as its owner wrote them, in one write."""
    js_name, namespace, path, who = _where(JOBSETS, jobset)

    async def stop() -> None:
        suspended = jobsets.suspended_jobset(await api.get(JOBSETS, js_name, namespace))
        if suspended is not None:
            await api.transport.checked("PUT", path, obj=who, query=STRICT_QUERY, body=suspended)

    await api.retrying(stop)


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
