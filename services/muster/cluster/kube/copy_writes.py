"""MultiKueue copies on this cluster: a workload dispatched here from another cluster is
created from what its origin sent (its Job or JobSet, started in the same write, or its Kueue
Workload), and the copies here are found by their origin label. The copies' manifests are
`copies` (pure)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from muster.api.resource import Resource
from muster.cluster.backend import PodSetStart, WorkloadCopy, WorkloadOrigin
from muster.cluster.errors import NotFoundError, RequestsRefusedError
from muster.cluster.kube import copies, jobs, jobsets
from muster.cluster.kube.api_objects import STRICT_QUERY, ApiObjects, already_exists, not_created
from muster.cluster.kube.overheads import runtime_overheads
from muster.cluster.kube.resize import ResizeError
from muster.cluster.kube.resources import JOBS, JOBSETS

# The owners a MultiKueue copy is made of (`copies.owner_copy`): their resource, and how
# their copy is created started.
COPIED_OWNERS: Mapping[str, tuple[Resource, Callable[..., dict[str, Any] | None]]] = {
    "Job": (JOBS, jobs.started_job),
    "JobSet": (JOBSETS, jobsets.started_jobset),
}


async def create_copy_of(
    api: ApiObjects,
    namespace: str,
    name: str,
    origin: WorkloadOrigin,
    pod_sets: Sequence[PodSetStart],
    admission: int,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Create the copy of workload `name` from cluster `origin.cluster`: (its Job or JobSet,
    created started) or (None, its Kueue Workload, created); ClusterError when the cluster
    refuses, naming the namespace when that is what is missing here."""
    owner = origin.owner()
    kind = str(owner.get("kind") or "") if owner is not None else ""
    if owner is not None and kind in COPIED_OWNERS:
        resource, start = COPIED_OWNERS[kind]
        made = copies.owner_copy(owner, origin=origin.cluster, workload=name)
        classes = await runtime_overheads(api, made, pod_sets)
        try:
            started = (
                start(
                    made,
                    pod_sets,
                    workload=name,
                    admission=admission,
                    runtime_classes=classes,
                )
                or made
            )
        except ResizeError as err:
            who = resource.describe(str(made["metadata"].get("name")), namespace)
            raise RequestsRefusedError(who, f"its pod template cannot ask for {err}") from None
        return await _create_copy(api, resource, started), None
    made = copies.workload_copy(origin.workload(), origin=origin.cluster)
    return None, await _create_copy(api, api.kueue["Workload"], made)


async def _create_copy(
    api: ApiObjects, resource: Resource, manifest: dict[str, Any]
) -> dict[str, Any]:
    meta = manifest["metadata"]
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    who = resource.describe(name, namespace)

    async def create() -> dict[str, Any]:
        response = await api.transport.request(
            "POST",
            resource.collection_path(namespace),
            obj=who,
            query=STRICT_QUERY,
            body={**manifest, "apiVersion": resource.api_version},
        )
        if response.ok:
            created: dict[str, Any] = response.json()
            return created
        if already_exists(response):
            return await api.get(resource, name, namespace)
        if response.status == 404:
            raise not_created(response, resource, who, namespace=namespace)
        raise response.error(who)

    return await api.retrying(create)


async def copies_from(api: ApiObjects, origins: Collection[str]) -> list[WorkloadCopy]:
    """The copies here of workloads from clusters `origins` (MultiKueue): Jobs, JobSets
    and Kueue Workloads labelled with one of them as their origin, sorted."""
    if not origins:
        return []
    selector = f"{copies.ORIGIN_LABEL} in ({','.join(sorted(origins))})"
    found: list[WorkloadCopy] = []
    for resource in (JOBS, JOBSETS, api.kueue["Workload"]):
        try:
            items = await api.listed(resource, labelSelector=selector)
        except NotFoundError:
            continue  # its CRD (JobSet's, Kueue's) not installed here: no copies of it
        for obj in items:
            key = copies.copied_workload(obj)
            if key:
                found.append(WorkloadCopy(workload=key, origin=copies.origin_of(obj)))
    return sorted(set(found))
