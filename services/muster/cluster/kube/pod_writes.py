"""The pods muster writes itself: a bare Kueue Workload's (muster is its controller), made from
its podset templates and created, unbound or placed on their nodes; and the bind of any pod
to its node (the `pods/binding` subresource)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from muster.api.wellknown import POD_SET_ANNOTATION, WORKLOAD_LABEL
from muster.cluster.backend import ADMISSION_LABEL, PodSetStart, pod_name, refuse_leftover
from muster.cluster.batches import run_in_batches
from muster.cluster.errors import (
    BindConflictError,
    ClusterError,
    NotFoundError,
    RequestsRefusedError,
)
from muster.cluster.kube import jobs
from muster.cluster.kube.api_objects import ApiObjects
from muster.cluster.kube.overheads import runtime_overheads
from muster.cluster.kube.resize import NO_RUNTIME_CLASSES, ResizeError, RuntimeOverheads, resized
from muster.cluster.kube.resources import PODS


async def create_pods(
    api: ApiObjects,
    workload: Mapping[str, Any],
    pod_sets: Sequence[PodSetStart],
    *,
    admission: int,
    nodes: Mapping[str, str] | None = None,
) -> None:
    """Create the pods of a bare Kueue Workload from its podset templates (idempotent);
    with `nodes`, only those it names, each on its node."""
    templates = {
        ps.get("name"): ps.get("template") or {}
        for ps in (workload.get("spec") or {}).get("podSets") or []
    }
    name = str((workload.get("metadata") or {}).get("name"))
    classes = await runtime_overheads(api, workload, pod_sets)
    try:
        pods = [
            _pod(
                workload,
                ps,
                i,
                template=templates.get(ps.name) or {},
                scheduler=api.config.scheduler_name,
                admission=admission,
                node=nodes[pod] if nodes is not None else "",
                runtime_classes=classes,
            )
            for ps in pod_sets
            for i in range(ps.count)
            if nodes is None or (pod := pod_name(name, ps.name, i)) in nodes
        ]
    except ResizeError as err:
        meta = workload.get("metadata") or {}
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        who = api.kueue["Workload"].describe(name, namespace)
        message = f"its podset template cannot ask for the admitted requests: {err}"
        raise RequestsRefusedError(who, message) from None

    # Every pod is made first, so a podset that cannot be resized creates none; then they
    # are written a batch at a time (cluster/batches.py).
    await run_in_batches(pods, api.create if nodes is None else partial(_create_placed, api))


async def _create_placed(api: ApiObjects, pod: dict[str, Any]) -> None:
    """Create `pod` on its node; one of its name already there must be its admission's."""
    if not await api.create(pod):
        meta = pod["metadata"]
        found = await api.get_or_none(PODS, meta["name"], meta["namespace"])
        if found is None:
            return
        refuse_leftover(found, pod)
        node = pod["spec"]["nodeName"]
        if (found.get("spec") or {}).get("nodeName") != node:  # not unbound, nor elsewhere
            uid = str((found.get("metadata") or {}).get("uid") or "")
            await bind_pod(api, meta["namespace"], meta["name"], node, uid=uid)


async def bind_pod(api: ApiObjects, namespace: str, pod: str, node: str, *, uid: str = "") -> None:
    """As the ClusterBackend protocol's `bind` says."""
    who = PODS.describe(pod, namespace)
    meta = {"name": pod, "namespace": namespace, **({"uid": uid} if uid else {})}
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,  # with a uid: the server binds only that pod (a precondition)
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }

    async def bind() -> None:
        response = await api.transport.request(
            "POST", PODS.object_path(pod, namespace, "binding"), obj=who, body=binding
        )
        if response.ok:
            return
        if response.status == 404:
            raise NotFoundError(who)
        if response.status != 409:
            raise response.error(who)
        # Already bound, being deleted, or gated: which one, the pod says.
        current = await api.get(PODS, pod, namespace)
        bound_to = (current.get("spec") or {}).get("nodeName") or ""
        if bound_to == node:
            return
        if bound_to:
            raise BindConflictError(who, bound_to=bound_to, wanted=node)
        raise ClusterError(who, "Conflict", response.error(who).message)

    await api.retrying(bind)


def _pod(
    workload: Mapping[str, Any],
    pod_set: PodSetStart,
    index: int,
    *,
    template: Mapping[str, Any],
    scheduler: str,
    admission: int = 0,
    node: str = "",
    runtime_classes: RuntimeOverheads = NO_RUNTIME_CLASSES,
) -> dict[str, Any]:
    """Pod `index` of `pod_set` from the Workload's template, placed as admitted (and, with
    `node`, created on that node: the API server takes `spec.nodeName` on create); a routed
    podset's with the alternative's requests (`resize`; `runtime_classes` as it takes them)."""
    meta = workload.get("metadata") or {}
    name = str(meta.get("name"))
    t_meta = template.get("metadata") or {}
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    if pod_set.routed:
        spec = resized(spec, pod_set.requests, runtime_classes=runtime_classes) or spec
    spec["schedulerName"] = scheduler
    if pod_set.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **pod_set.node_selector}
    tolerations = list(spec.get("tolerations") or [])
    for t in map(jobs.toleration_manifest, pod_set.tolerations):
        if t not in tolerations:
            tolerations.append(t)
    if tolerations:
        spec["tolerations"] = tolerations
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, pod_set.name, index),
            "namespace": meta.get("namespace"),
            "labels": {
                **(t_meta.get("labels") or {}),
                **pod_set.labels,
                WORKLOAD_LABEL: name,
                **({ADMISSION_LABEL: str(admission)} if admission else {}),
            },
            "annotations": {
                **(t_meta.get("annotations") or {}),
                **pod_set.annotations,
                POD_SET_ANNOTATION: pod_set.name,
            },
            "ownerReferences": [
                {
                    "apiVersion": workload.get("apiVersion"),
                    "kind": "Workload",
                    "name": name,
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
