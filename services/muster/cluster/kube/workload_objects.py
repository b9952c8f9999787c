"""The objects a workload name stands for on this cluster: its Job or JobSet (found as Kueue
names them, or a MultiKueue copy by its prebuilt-workload label), its Kueue Workload, and
the pods labelled with it or referring to it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.api.job import QUEUE_NAME_KEY
from muster.api.wellknown import POD_GROUP_LABEL, WORKLOAD_LABEL
from muster.cluster.errors import NotFoundError
from muster.cluster.kube import copies, jobs, jobsets
from muster.cluster.kube.api_objects import ApiObjects
from muster.cluster.kube.resources import JOBS, JOBSETS, PODS


async def job_of(
    api: ApiObjects, namespace: str, name: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the Job workload `name` stands for, the Kueue Workload `name`), each None if absent.

    Tried in turn: the Job name Kueue's naming implies, the Kueue Workload's controller
    owner, and the queued Jobs of the namespace (a long Job name is cut in the Workload's).
    """
    if name.startswith("job-") and len(name) > len("job--12345"):
        guess = await api.get_or_none(JOBS, name[len("job-") : -6], namespace)
        if guess is not None and name in (jobs.workload_name(guess), _prebuilt(guess)):
            return guess, None  # the Job, or its copy from another cluster
    workload = await api.get_or_none(api.kueue["Workload"], name, namespace)
    owner = _controller(workload) if workload is not None else None
    if owner is not None and owner.get("kind") == "Job":
        job = await api.get_or_none(JOBS, str(owner.get("name")), namespace)
        if job is not None and (job.get("metadata") or {}).get("uid") == owner.get("uid"):
            return job, workload
    if workload is None and name.startswith("job-"):
        for job in await api.listed(JOBS, namespace=namespace, labelSelector=QUEUE_NAME_KEY):
            if name in (jobs.workload_name(job), _prebuilt(job)):
                return job, None
    return None, workload


async def jobset_of(api: ApiObjects, namespace: str, name: str) -> dict[str, Any] | None:
    """The JobSet workload `name` stands for (`jobset-<name>-<hash>`; a copy from another
    cluster by its `kueue.x-k8s.io/prebuilt-workload-name`, its uid being its own), None if
    none: the JobSet that name implies, else the queued JobSets of the namespace (a long
    name is cut in the Workload's)."""
    if not name.startswith("jobset-"):
        return None
    try:
        guess = await api.get_or_none(JOBSETS, name[len("jobset-") : -6], namespace)
        if guess is not None and name in (jobsets.workload_name(guess), _prebuilt(guess)):
            return guess  # the JobSet, or its copy from another cluster
        found = await api.listed(JOBSETS, namespace=namespace, labelSelector=QUEUE_NAME_KEY)
    except NotFoundError:  # JobSets not served here (the 404 of a list)
        return None
    return next((js for js in found if name in (jobsets.workload_name(js), _prebuilt(js))), None)


async def pods_of(api: ApiObjects, namespace: str, name: str) -> list[dict[str, Any]]:
    """The pods of workload or pod group `name`: labelled with it, or (a Workload API pod
    group "<workload>/<podGroup>[/<replica>]") referring to it."""
    if "/" in name:
        ref = name.split("/")
        return [p for p in await api.listed(PODS, namespace=namespace) if _workload_ref(p) == ref]
    labelled = await api.listed(PODS, namespace=namespace, labelSelector=f"{WORKLOAD_LABEL}={name}")
    grouped = await api.listed(PODS, namespace=namespace, labelSelector=f"{POD_GROUP_LABEL}={name}")
    by_name = {p["metadata"]["name"]: p for p in (*labelled, *grouped)}
    return [by_name[n] for n in sorted(by_name)]


def _prebuilt(job: Mapping[str, Any]) -> str:
    """The Kueue Workload a copied Job or JobSet stands for ("" for one of this cluster's
    own)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    return str(labels.get(copies.PREBUILT_WORKLOAD_LABEL) or "") if copies.origin_of(job) else ""


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def _workload_ref(pod: Mapping[str, Any]) -> list[str]:
    ref = (pod.get("spec") or {}).get("workloadRef") or {}
    parts = [str(ref.get("name", "")), str(ref.get("podGroup", ""))]
    replica = ref.get("podGroupReplicaKey")
    return [*parts, str(replica)] if replica else parts
