"""The resource types the stand-in serves: built-in presets, CRD-like registration, discovery.

A `ResourceType` is one (group, plural) served at one or more versions from one store, as a
CustomResourceDefinition with the `None` conversion strategy is: only `apiVersion` differs
between versions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from muster.devtools.apiserver.builtin_schemas import BUILTIN
from muster.devtools.apiserver.errors import Cause, bad_value, required, unsupported
from muster.devtools.apiserver.objects import JsonObj, lookup, name_of

_POD_FIELDS = (
    "spec.nodeName",
    "spec.schedulerName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)


class ResourceType(msgspec.Struct, frozen=True, kw_only=True):
    """One served resource. `custom` gives CustomResourceDefinition semantics: no strategic
    merge patch, no unconditional update, and every change outside metadata and status bumps
    metadata.generation."""

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    status: bool = False  # has a status subresource
    custom: bool = False
    generation: bool = True  # metadata.generation is tracked
    field_labels: tuple[str, ...] = ()  # fieldSelector labels besides metadata.name/namespace

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def preferred_version(self) -> str:
        return sorted(self.versions, key=version_priority)[0]

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def selectable_fields(self) -> frozenset[str]:
        base = ("metadata.name", "metadata.namespace") if self.namespaced else ("metadata.name",)
        return frozenset(base + self.field_labels)

    def subresources(self) -> dict[str, str]:
        """Subresource name → the Kind it accepts."""
        found: dict[str, str] = {}
        if self.status:
            found["status"] = self.kind
        if self.key == ("", "pods"):
            found["binding"] = "Binding"
        return found


def version_priority(version: str) -> tuple[int, int, int, str]:
    """A sort key putting Kubernetes versions in preference order: v2 > v1 > v1beta2 > v1alpha1."""
    matched = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if matched is None:
        return (9, 0, 0, version)
    stability = {None: 0, "beta": 1, "alpha": 2}[matched.group(2)]
    return (stability, -int(matched.group(1)), -int(matched.group(3) or 0), version)


def _rt(
    group: str, versions: tuple[str, ...], plural: str, kind: str, **kw: object
) -> ResourceType:
    return msgspec.convert(
        {"group": group, "versions": versions, "plural": plural, "kind": kind, **kw}, ResourceType
    )


def builtin_resources(gang_api: str | None = "1.35") -> tuple[ResourceType, ...]:
    """What a bare cluster serves, as far as muster uses it; `gang_api` the release whose
    scheduling.k8s.io gang API it serves (`gang_api_resources`)."""
    v1 = ("v1",)
    return (
        _rt(
            "",
            v1,
            "namespaces",
            "Namespace",
            namespaced=False,
            short_names=("ns",),
            status=True,
            generation=False,
            field_labels=("status.phase",),
        ),
        _rt(
            "",
            v1,
            "nodes",
            "Node",
            namespaced=False,
            short_names=("no",),
            status=True,
            generation=False,
            field_labels=("spec.unschedulable",),
        ),
        _rt(
            "",
            v1,
            "pods",
            "Pod",
            namespaced=True,
            short_names=("po",),
            status=True,
            field_labels=_POD_FIELDS,
        ),
        _rt(
            "",
            v1,
            "events",
            "Event",
            namespaced=True,
            short_names=("ev",),
            generation=False,
            field_labels=_EVENT_FIELDS,
        ),
        _rt(
            "",
            v1,
            "configmaps",
            "ConfigMap",
            namespaced=True,
            short_names=("cm",),
            generation=False,
        ),
        _rt(
            "",
            v1,
            "limitranges",
            "LimitRange",
            namespaced=True,
            short_names=("limits",),
            generation=False,
        ),
        _rt("", v1, "podtemplates", "PodTemplate", namespaced=True, generation=False),
        _rt("", v1, "secrets", "Secret", namespaced=True, generation=False),
        _rt(
            "events.k8s.io",
            v1,
            "events",
            "Event",
            namespaced=True,
            short_names=("ev",),
            generation=False,
        ),
        _rt(
            "batch",
            v1,
            "jobs",
            "Job",
            namespaced=True,
            status=True,
            field_labels=("status.successful",),
        ),
        _rt(
            "scheduling.k8s.io",
            v1,
            "priorityclasses",
            "PriorityClass",
            namespaced=False,
            short_names=("pc",),
            generation=False,
        ),
        _rt(
            "node.k8s.io",
            v1,
            "runtimeclasses",
            "RuntimeClass",
            namespaced=False,
            generation=False,
        ),
        _rt("coordination.k8s.io", v1, "leases", "Lease", namespaced=True, generation=False),
        _rt(
            "apiextensions.k8s.io",
            v1,
            "customresourcedefinitions",
            "CustomResourceDefinition",
            namespaced=False,
            short_names=("crd", "crds"),
            status=True,
        ),
        *gang_api_resources(gang_api),
    )


# Kubernetes releases and the scheduling.k8s.io gang API each serves with its gates on.
GANG_API_RELEASES = ("1.35", "1.36", "1.37")


def gang_api_resources(release: str | None) -> tuple[ResourceType, ...]:
    """The built-in gang API of Kubernetes `release` with GenericWorkload (and, in v1.37,
    CompositePodGroup) on; None: the gates off, the resources not served at all.

    v1.35: Workload v1alpha1. v1.36: Workload and PodGroup v1alpha2. v1.37: Workload and
    PodGroup v1beta1 and v1alpha3, CompositePodGroup v1alpha3 (v1alpha2 dropped).
    """
    if release is None:
        return ()
    if release not in GANG_API_RELEASES:
        raise ValueError(f"gang API of Kubernetes {release} unknown; one of {GANG_API_RELEASES}")
    group = "scheduling.k8s.io"
    if release == "1.35":
        return (_rt(group, ("v1alpha1",), "workloads", "Workload", namespaced=True),)
    versions = ("v1alpha2",) if release == "1.36" else ("v1beta1", "v1alpha3")
    found: tuple[ResourceType, ...] = (
        _rt(group, versions, "workloads", "Workload", namespaced=True),
        _rt(group, versions, "podgroups", "PodGroup", namespaced=True, status=True),
    )
    if release == "1.37":
        found += (
            _rt(
                group,
                ("v1alpha3",),
                "compositepodgroups",
                "CompositePodGroup",
                namespaced=True,
                status=True,
            ),
        )
    return found


def kueue_resources() -> tuple[ResourceType, ...]:
    """Kueue's custom resources at v1beta1 and v1beta2, as its CRDs register them."""
    versions = ("v1beta1", "v1beta2")

    def kueue(plural: str, kind: str, namespaced: bool, status: bool, *short: str) -> ResourceType:
        return _rt(
            "kueue.x-k8s.io",
            versions,
            plural,
            kind,
            namespaced=namespaced,
            status=status,
            custom=True,
            short_names=short,
        )

    return (
        kueue("resourceflavors", "ResourceFlavor", False, False, "flavor", "flavors", "rf"),
        kueue("clusterqueues", "ClusterQueue", False, True, "cq"),
        kueue("localqueues", "LocalQueue", True, True, "queue", "queues", "lq"),
        kueue("workloads", "Workload", True, True, "wl"),
        kueue("workloadpriorityclasses", "WorkloadPriorityClass", False, False),
        kueue("admissionchecks", "AdmissionCheck", False, True),
        kueue("cohorts", "Cohort", False, True),
        kueue("provisioningrequestconfigs", "ProvisioningRequestConfig", False, False, "prc"),
        kueue("multikueueconfigs", "MultiKueueConfig", False, False, "mkconf"),
        kueue("multikueueclusters", "MultiKueueCluster", False, True, "mkc"),
    )


def autoscaling_resources() -> tuple[ResourceType, ...]:
    """The cluster-autoscaler's ProvisioningRequest CRD (what Kueue's check asks it for)."""
    return (
        _rt(
            "autoscaling.x-k8s.io",
            ("v1",),
            "provisioningrequests",
            "ProvisioningRequest",
            namespaced=True,
            status=True,
            custom=True,
            short_names=("provreq", "provreqs"),
        ),
    )


def podgroup_resources() -> tuple[ResourceType, ...]:
    """The coscheduling plugin's PodGroup CRD (scheduler-plugins)."""
    return (
        _rt(
            "scheduling.x-k8s.io",
            ("v1alpha1",),
            "podgroups",
            "PodGroup",
            namespaced=True,
            status=True,
            custom=True,
            short_names=("pg", "pgs"),
        ),
    )


def jobset_resources() -> tuple[ResourceType, ...]:
    """The JobSet CRD (jobset.x-k8s.io; its controller: `jobsetcontroller`)."""
    return (
        _rt(
            "jobset.x-k8s.io",
            ("v1alpha2",),
            "jobsets",
            "JobSet",
            namespaced=True,
            status=True,
            custom=True,
            short_names=("js",),
        ),
    )


def default_resources(gang_api: str | None = "1.35") -> tuple[ResourceType, ...]:
    """Built-ins plus Kueue, PodGroup, ProvisioningRequest and JobSet CRDs: a cluster muster
    can run on, with the cluster-autoscaler's provisioning and distributed training's JobSets."""
    return (
        builtin_resources(gang_api)
        + kueue_resources()
        + podgroup_resources()
        + autoscaling_resources()
        + jobset_resources()
    )


def from_crd(crd: JsonObj) -> tuple[ResourceType | None, list[Cause]]:
    """The ResourceType an apiextensions.k8s.io/v1 CustomResourceDefinition registers, or the
    field problems that make it Invalid."""
    causes: list[Cause] = []
    group, plural, kind = (
        lookup(crd, p) for p in ("spec.group", "spec.names.plural", "spec.names.kind")
    )
    scope = lookup(crd, "spec.scope")
    for field, value in (
        ("spec.group", group),
        ("spec.names.plural", plural),
        ("spec.names.kind", kind),
    ):
        if not isinstance(value, str) or not value:
            causes.append(required(field))
    if scope not in ("Namespaced", "Cluster"):
        causes.append(unsupported("spec.scope", scope, ["Cluster", "Namespaced"]))
    served: list[str] = []
    status = False
    storage = 0
    raw_versions = lookup(crd, "spec.versions")
    for i, version in enumerate(raw_versions if isinstance(raw_versions, list) else []):
        name = version.get("name") if isinstance(version, dict) else None
        if not isinstance(name, str) or not name:
            causes.append(required(f"spec.versions[{i}].name"))
            continue
        storage += bool(version.get("storage"))
        if version.get("served", False):
            served.append(name)
        status = status or isinstance(lookup(version, "subresources.status"), dict)
    if not served:
        causes.append(required("spec.versions", "at least one version must be served"))
    if storage != 1:
        causes.append(
            bad_value(
                "spec.versions", storage, "must have exactly one version marked as storage version"
            )
        )
    if not causes and name_of(crd) != f"{plural}.{group}":
        causes.append(
            bad_value("metadata.name", name_of(crd), 'must be spec.names.plural+"."+spec.group')
        )
    if causes:
        return None, causes
    names = lookup(crd, "spec.names")
    assert isinstance(names, dict)
    assert isinstance(group, str)
    short = names.get("shortNames")
    return _rt(
        group,
        tuple(served),
        str(plural),
        str(kind),
        namespaced=scope == "Namespaced",
        singular=str(names.get("singular") or ""),
        short_names=tuple(s for s in short if isinstance(s, str))
        if isinstance(short, list)
        else (),
        status=status,
        custom=True,
    ), []


def crd_schemas(crd: JsonObj) -> dict[str, JsonObj]:
    """Each served version's `openAPIV3Schema` of a CustomResourceDefinition."""
    found: dict[str, JsonObj] = {}
    versions = lookup(crd, "spec.versions")
    for version in versions if isinstance(versions, list) else []:
        schema = lookup(version, "schema.openAPIV3Schema") if isinstance(version, dict) else None
        if isinstance(schema, dict) and version.get("served"):
            found[str(version.get("name"))] = schema
    return found


def crd_status(crd: JsonObj, *, now: str) -> JsonObj:
    """The status the apiextensions controller gives an accepted CRD."""
    spec = crd.get("spec", {})
    versions = spec.get("versions", [])
    stored = [v["name"] for v in versions if isinstance(v, dict) and v.get("storage")]
    return {
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": now, "reason": r, "message": m}
            for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ],
        "acceptedNames": spec.get("names", {}),
        "storedVersions": stored,
    }


class Registry:
    """Served resource types by (group, version, plural), and the discovery documents."""

    def __init__(self, types: Iterable[ResourceType]) -> None:
        self._by_key: dict[tuple[str, str], ResourceType] = {}
        # Field validation's schemas: a CRD's per version, a built-in kind's for every one.
        self._schemas: dict[tuple[str, str], dict[str, JsonObj]] = {}
        for rt in types:
            self.add(rt)

    def add(self, rt: ResourceType, *, schemas: dict[str, JsonObj] | None = None) -> None:
        self._by_key[rt.key] = rt
        if schemas is not None:
            self._schemas[rt.key] = schemas
        elif rt.key in BUILTIN:
            self._schemas[rt.key] = dict.fromkeys(rt.versions, BUILTIN[rt.key])
        else:
            self._schemas.pop(rt.key, None)

    def schema(self, rt: ResourceType, version: str) -> JsonObj | None:
        """The structural schema of `rt` at `version` (None: its fields are not checked)."""
        return self._schemas.get(rt.key, {}).get(version)

    def remove(self, key: tuple[str, str]) -> ResourceType | None:
        self._schemas.pop(key, None)
        return self._by_key.pop(key, None)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        rt = self._by_key.get((group, plural))
        return rt if rt is not None and version in rt.versions else None

    def by_key(self, key: tuple[str, str]) -> ResourceType | None:
        return self._by_key.get(key)

    def all(self) -> list[ResourceType]:
        return list(self._by_key.values())

    def group_versions(self) -> dict[str, list[str]]:
        """Group → its served versions, most preferred first (core group as "")."""
        found: dict[str, set[str]] = {}
        for rt in self._by_key.values():
            found.setdefault(rt.group, set()).update(rt.versions)
        return {g: sorted(vs, key=version_priority) for g, vs in sorted(found.items())}

    def api_versions(self, server_address: str) -> JsonObj:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
            ],
        }

    def api_group(self, group: str) -> JsonObj | None:
        versions = self.group_versions().get(group)
        if not group or versions is None:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": entries,
            "preferredVersion": entries[0],
        }

    def api_group_list(self) -> JsonObj:
        groups = [self.api_group(g) for g in self.group_versions() if g]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def resource_list(self, group: str, version: str) -> JsonObj | None:
        served = [
            rt for rt in self._by_key.values() if rt.group == group and version in rt.versions
        ]
        if not served:
            return None
        resources: list[JsonObj] = []
        for rt in sorted(served, key=lambda r: r.plural):
            entry: JsonObj = {
                "name": rt.plural,
                "singularName": rt.singular or rt.kind.lower(),
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": [
                    "create",
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "update",
                    "watch",
                ],
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            resources.append(entry)
            for sub, kind in rt.subresources().items():
                verbs = ["create"] if sub == "binding" else ["get", "patch", "update"]
                resources.append(
                    {
                        "name": f"{rt.plural}/{sub}",
                        "singularName": "",
                        "namespaced": rt.namespaced,
                        "kind": kind,
                        "verbs": verbs,
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }


def stamp_version(obj: JsonObj, rt: ResourceType, version: str) -> JsonObj:
    """`obj` as served at `version` (a shallow copy when apiVersion or kind differ)."""
    api_version = rt.api_version(version)
    if obj.get("apiVersion") == api_version and obj.get("kind") == rt.kind:
        return obj
    served = dict(obj)
    served["apiVersion"] = api_version
    served["kind"] = rt.kind
    return served
