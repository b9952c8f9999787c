"""The API resources muster reads and writes: REST paths, watched selections, and change keys.

`watched_sources` is what `KubeBackend.watch` follows (one list-then-watch per entry);
`resource_for_kind` resolves the kinds `apply`, `create` and `delete` accept. Keys and kinds of
changes are the simulated cluster's (`muster.cluster.keys`), so consumers see one format
whichever backend runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from muster.api.job import QUEUE_NAME_KEY
from muster.api.resource import Resource
from muster.api.wellknown import WORKLOAD_LABEL
from muster.cluster.backend import Selection
from muster.cluster.errors import ClusterError
from muster.cluster.keys import (
    SCHEDULING_POD_GROUP_KIND,
    SCHEDULING_WORKLOAD_KIND,
    object_key,
)

KUEUE_GROUP = "kueue.x-k8s.io"
SCHEDULING_GROUP = "scheduling.k8s.io"
POD_GROUP_GROUP = "scheduling.x-k8s.io"


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """One list-then-watch: a resource and the server-side selection of its objects."""

    resource: Resource
    label_selector: str = ""
    field_selector: str = ""

    @property
    def name(self) -> str:
        selection = ",".join(s for s in (self.label_selector, self.field_selector) if s)
        plural = f"{self.resource.plural}.{self.resource.group or 'core'}"
        return f"{plural}[{selection}]" if selection else plural


def _r(group: str, version: str, plural: str, kind: str, namespaced: bool, **kw: Any) -> Resource:
    return Resource(
        group=group, version=version, plural=plural, kind=kind, namespaced=namespaced, **kw
    )


NODES = _r("", "v1", "nodes", "Node", False)
PODS = _r("", "v1", "pods", "Pod", True)
NAMESPACES = _r("", "v1", "namespaces", "Namespace", False)
LIMIT_RANGES = _r("", "v1", "limitranges", "LimitRange", True)
RUNTIME_CLASSES = _r("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False)
JOBS = _r("batch", "v1", "jobs", "Job", True)
# jobset.x-k8s.io's CRD: a cluster without it has no JobSets to run (its watch waits for it).
JOBSETS = _r("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True, optional=True)
PRIORITY_CLASSES = _r(SCHEDULING_GROUP, "v1", "priorityclasses", "PriorityClass", False)
SCHEDULING_WORKLOADS = _r(
    SCHEDULING_GROUP,
    "v1alpha1",
    "workloads",
    "Workload",
    True,
    change_kind=SCHEDULING_WORKLOAD_KIND,
    optional=True,  # alpha: served only where the feature gate is on
)
POD_GROUPS = _r(POD_GROUP_GROUP, "v1alpha1", "podgroups", "PodGroup", True, optional=True)
# Today's gang API (discovery picks the version): PodGroups apart from scheduler-plugins'.
SCHEDULING_POD_GROUPS = _r(
    SCHEDULING_GROUP,
    "v1beta1",
    "podgroups",
    "PodGroup",
    True,
    change_kind=SCHEDULING_POD_GROUP_KIND,
    optional=True,
)
COMPOSITE_POD_GROUPS = _r(
    SCHEDULING_GROUP, "v1alpha3", "compositepodgroups", "CompositePodGroup", True, optional=True
)
_GANG_API = {
    r.plural: r for r in (SCHEDULING_WORKLOADS, SCHEDULING_POD_GROUPS, COMPOSITE_POD_GROUPS)
}


def gang_resource(plural: str, version: str) -> Resource:
    """The scheduling.k8s.io resource `plural` ("workloads", "podgroups",
    "compositepodgroups") at `version`."""
    return msgspec.structs.replace(_GANG_API[plural], version=version)


# Kueue's kinds: (plural, kind, namespaced).
_KUEUE_KINDS = (
    ("resourceflavors", "ResourceFlavor", False),
    ("clusterqueues", "ClusterQueue", False),
    ("cohorts", "Cohort", False),
    ("localqueues", "LocalQueue", True),
    ("workloadpriorityclasses", "WorkloadPriorityClass", False),
    ("admissionchecks", "AdmissionCheck", False),
    ("multikueueconfigs", "MultiKueueConfig", False),
    ("multikueueclusters", "MultiKueueCluster", False),
    ("workloads", "Workload", True),
)


def kueue_resources(version: str) -> dict[str, Resource]:
    """Kueue's resources at `version` ("v1beta1" or "v1beta2"), by kind."""
    return {
        kind: _r(KUEUE_GROUP, version, plural, kind, namespaced, optional=True)
        for plural, kind, namespaced in _KUEUE_KINDS
    }


def watched_sources(
    *,
    scheduler_name: str,
    kueue_version: str,
    selection: Selection = "workloads",
    gang_api: Mapping[str, Resource] | None = None,
) -> tuple[Source, ...]:
    """What a watch of `selection` follows, selected on the server where the API allows it.

    Pods come from several selections (a selector cannot OR a field with a label): those for
    muster's scheduler; for "workloads" those of muster workloads (a Job's pods get the workload
    label when the binder starts it); for "placement" every pod bound to a node, whichever
    scheduler bound it, for the room it takes. Jobs and JobSets only when they name a queue by
    label.
    `gang_api`: the scheduling.k8s.io resources discovered by kind (`discovery`); None for the
    v1.35 Workload, tried whether served or not.
    """
    found = {"Workload": SCHEDULING_WORKLOADS} if gang_api is None else gang_api
    gangs = (
        *(Source(resource=found[kind]) for kind in sorted(found)),
        Source(resource=POD_GROUPS),
    )
    muster_pods = Source(resource=PODS, field_selector=f"spec.schedulerName={scheduler_name}")
    if selection == "placement":
        return (
            Source(resource=PRIORITY_CLASSES),
            Source(resource=NODES),
            muster_pods,
            Source(resource=PODS, field_selector="spec.nodeName!="),
            *gangs,
        )
    kueue = kueue_resources(kueue_version)
    return (
        Source(resource=NAMESPACES),
        Source(resource=LIMIT_RANGES),
        Source(resource=RUNTIME_CLASSES),
        Source(resource=PRIORITY_CLASSES),
        *(Source(resource=kueue[kind]) for _, kind, _ in _KUEUE_KINDS),
        Source(resource=JOBS, label_selector=QUEUE_NAME_KEY),
        Source(resource=JOBSETS, label_selector=QUEUE_NAME_KEY),
        Source(resource=NODES),
        muster_pods,
        Source(resource=PODS, label_selector=WORKLOAD_LABEL),
        *gangs,
    )


def resource_for(manifest: Mapping[str, Any], *, kueue_version: str) -> Resource:
    """The resource a manifest is written to, from its apiVersion and kind (kind alone when the
    manifest has no apiVersion). Raises ClusterError (Invalid) for a kind muster does not know.
    """
    kind = manifest.get("kind")
    api_version = manifest.get("apiVersion")
    meta = manifest.get("metadata")
    name = meta.get("name", "") if isinstance(meta, Mapping) else ""
    if not isinstance(kind, str) or not kind:
        raise ClusterError(f"?/{name}", "Invalid", "kind: is required")
    group, _, version = (
        api_version.rpartition("/") if isinstance(api_version, str) else ("", "", "")
    )
    for resource in _KNOWN:
        if resource.kind != kind:
            continue
        if not version:
            return (
                kueue_resources(kueue_version)[kind] if resource.group == KUEUE_GROUP else resource
            )
        if resource.group == group:
            return msgspec.structs.replace(resource, version=version)
    raise ClusterError(
        f"{kind}/{name}", "Invalid", f"kind {api_version or ''} {kind} is not one muster writes"
    )


def resource_for_kind(kind: str, *, kueue_version: str) -> Resource:
    """The resource of `kind` as `delete` names it ("Workload" is Kueue's)."""
    if kind == SCHEDULING_WORKLOAD_KIND:
        return SCHEDULING_WORKLOADS
    if kind == SCHEDULING_POD_GROUP_KIND:
        return SCHEDULING_POD_GROUPS
    return resource_for({"kind": kind}, kueue_version=kueue_version)


def change_key(resource: Resource, obj: Mapping[str, Any]) -> str:
    """The key of `obj` in changes: node.<name>, pod.<ns>.<name>, obj.<kind>.<ns|_>.<name>."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace", "") if resource.namespaced else ""
    return object_key(resource.key_kind, namespace, meta.get("name", ""))


_CONFIG_MAPS = _r("", "v1", "configmaps", "ConfigMap", True)
_KNOWN: tuple[Resource, ...] = (
    NODES,
    PODS,
    NAMESPACES,
    LIMIT_RANGES,
    RUNTIME_CLASSES,
    _CONFIG_MAPS,
    JOBS,
    JOBSETS,
    PRIORITY_CLASSES,
    *kueue_resources("v1beta1").values(),
    SCHEDULING_WORKLOADS,  # after Kueue's: a bare "Workload" is Kueue's
    POD_GROUPS,  # before today's: a bare "PodGroup" is scheduler-plugins'
    SCHEDULING_POD_GROUPS,
    COMPOSITE_POD_GROUPS,
)


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True):
    """An object whose status muster writes: "ClusterQueue", "LocalQueue", "Workload", ...;
    a "Job" that MultiKueue manages."""

    kind: str
    name: str
    namespace: str = ""

    def __str__(self) -> str:
        return (
            f"{self.kind}/{self.namespace}/{self.name}"
            if self.namespace
            else f"{self.kind}/{self.name}"
        )
