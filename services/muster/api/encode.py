"""Model objects back to Kueue-shaped dicts, for output (`muster simulate`, the gateway).

Empty fields are left out, as `kubectl get -o yaml` leaves them out. Quantities are printed
with `format_quantity`: binary suffixes for byte resources only.
"""

from __future__ import annotations

from typing import Any

from muster.api.convert import KUEUE_V1BETA1, KUEUE_V1BETA2, POD_PRIORITY_CLASS
from muster.api.model import (
    Admission,
    ContainerResources,
    ObjectMeta,
    PodSet,
    Resources,
    Toleration,
    Workload,
)
from muster.api.quantity import format_quantity

_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})


def is_byte_resource(name: str) -> bool:
    """Return whether resource `name` counts bytes (printed "10Gi") rather than things ("4")."""
    return name in _BYTE_RESOURCES or name.startswith("hugepages-")


def quantities_to_strings(resources: Resources) -> dict[str, str]:
    """Return `{resource: quantity string}`: "500m", "2", "10Gi" (binary only for bytes)."""
    return {
        name: format_quantity(value, binary=is_byte_resource(name))
        for name, value in sorted(resources.items())
    }


def workload_to_kueue(wl: Workload, *, api_version: str = KUEUE_V1BETA2) -> dict[str, Any]:
    """Return `wl` as a Kueue Workload manifest of `api_version` (v1beta1 or v1beta2).

    v1beta2 writes `priorityClassRef`; v1beta1 writes `priorityClassName` and
    `priorityClassSource`. Each podset becomes one container "main" with the per-pod requests.
    """
    if api_version not in (KUEUE_V1BETA1, KUEUE_V1BETA2):
        raise ValueError(f"cannot encode a Workload as {api_version}")
    spec: dict[str, Any] = {"queueName": wl.queue_name} if wl.queue_name else {}
    spec["podSets"] = [_pod_set(ps) for ps in wl.pod_sets]
    if wl.priority is not None:
        spec["priority"] = wl.priority
    if wl.priority_class_name:
        spec.update(_priority_class(wl, api_version=api_version))
    spec["active"] = wl.active
    manifest: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "Workload",
        "metadata": _metadata(wl.meta),
        "spec": spec,
    }
    status = _status(wl)
    if status:
        manifest["status"] = status
    return manifest


def _metadata(meta: ObjectMeta) -> dict[str, Any]:
    out: dict[str, Any] = {"name": meta.name}
    if meta.namespace:
        out["namespace"] = meta.namespace
    if meta.uid:
        out["uid"] = meta.uid
    if meta.labels:
        out["labels"] = dict(meta.labels)
    if meta.annotations:
        out["annotations"] = dict(meta.annotations)
    if meta.creation_timestamp:
        out["creationTimestamp"] = meta.creation_timestamp
    if meta.owner_references:
        out["ownerReferences"] = [
            {
                "apiVersion": o.api_version,
                "kind": o.kind,
                "name": o.name,
                **({"uid": o.uid} if o.uid else {}),
                **({"controller": True} if o.controller else {}),
            }
            for o in meta.owner_references
        ]
    return out


def _pod_set(ps: PodSet) -> dict[str, Any]:
    pod_spec = _containers(ps)
    if ps.node_selector:
        pod_spec["nodeSelector"] = dict(ps.node_selector)
    if ps.tolerations:
        pod_spec["tolerations"] = [_toleration(t) for t in ps.tolerations]
    if ps.node_affinity_terms:
        terms = [
            {
                "matchExpressions": [
                    {
                        "key": e.key,
                        "operator": e.operator,
                        **({"values": list(e.values)} if e.values else {}),
                    }
                    for e in term.match_expressions
                ]
            }
            for term in ps.node_affinity_terms
        ]
        required = {"nodeSelectorTerms": terms}
        pod_spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    template: dict[str, Any] = {"spec": pod_spec}
    if ps.annotations:
        template = {"metadata": {"annotations": dict(ps.annotations)}, **template}
    out: dict[str, Any] = {"name": ps.name, "count": ps.count}
    if ps.min_count is not None:
        out["minCount"] = ps.min_count
    out["template"] = template
    return out


def _containers(ps: PodSet) -> dict[str, Any]:
    """The pod spec's containers: one "main" with the per-pod requests, or, when the podset
    keeps its containers (`muster.api.podspec.just_requests`), each as written (requests and
    limits apart), so that a reader can apply a namespace's LimitRanges to them as Kueue does."""
    written = ps.resources
    if written is None:
        container: dict[str, Any] = {"name": "main"}
        if ps.requests:
            container["resources"] = {"requests": quantities_to_strings(ps.requests)}
        return {"containers": [container]}
    pod_spec: dict[str, Any] = {
        "containers": [_container(f"c{i}", c) for i, c in enumerate(written.containers)]
    }
    if written.init_containers:
        pod_spec["initContainers"] = [
            _container(f"init{i}", c) for i, c in enumerate(written.init_containers)
        ]
    if written.overhead:
        pod_spec["overhead"] = quantities_to_strings(written.overhead)
    if written.pod is not None:
        pod_spec["resources"] = _requirements(written.pod)
    if written.runtime_class_name:
        pod_spec["runtimeClassName"] = written.runtime_class_name
    return pod_spec


def _requirements(c: ContainerResources) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if c.requests:
        resources["requests"] = quantities_to_strings(c.requests)
    if c.limits:
        resources["limits"] = quantities_to_strings(c.limits)
    return resources


def _container(name: str, c: ContainerResources) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if resources := _requirements(c):
        out["resources"] = resources
    if c.sidecar:
        out["restartPolicy"] = "Always"
    return out


def _toleration(t: Toleration) -> dict[str, str]:
    out = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
    return {k: v for k, v in out.items() if v}


def _priority_class(wl: Workload, *, api_version: str) -> dict[str, Any]:
    source = wl.priority_class_source or POD_PRIORITY_CLASS
    if api_version == KUEUE_V1BETA1:
        return {"priorityClassName": wl.priority_class_name, "priorityClassSource": source}
    if source == POD_PRIORITY_CLASS:
        ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass"}
    else:
        ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass"}
    return {"priorityClassRef": {**ref, "name": wl.priority_class_name}}


def _admission(admission: Admission) -> dict[str, Any]:
    return {
        "clusterQueue": admission.cluster_queue,
        "podSetAssignments": [
            {
                "name": a.name,
                "flavors": dict(sorted(a.flavors.items())),
                "count": a.count,
                "resourceUsage": quantities_to_strings(a.resource_usage),
            }
            for a in admission.pod_set_assignments
        ],
    }


def _status(wl: Workload) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if wl.admission is not None:
        status["admission"] = _admission(wl.admission)
    if wl.conditions:
        status["conditions"] = [
            {
                "type": c.type,
                "status": c.status,
                **({"reason": c.reason} if c.reason else {}),
                **({"message": c.message} if c.message else {}),
            }
            for c in wl.conditions
        ]
    if wl.admission_checks:
        status["admissionChecks"] = [
            {
                "name": a.name,
                "state": a.state,
                **({"message": a.message} if a.message else {}),
                **({"retryCount": a.retry_count} if a.retry_count else {}),
            }
            for a in wl.admission_checks
        ]
    if wl.reclaimable_pods:
        status["reclaimablePods"] = [
            {"name": p.name, "count": p.count} for p in wl.reclaimable_pods
        ]
    return status
