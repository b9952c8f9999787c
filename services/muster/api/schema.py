"""The fields each kind has, for strict field validation (`--validate=strict`, as kubectl's).

muster reads only part of most objects (a Job's pod template has hundreds of fields it never
looks at), so its wire structs cannot say what is unknown. This table can: for each kind, every
field Kubernetes (v1.35) or Kueue (v1beta1 and v1beta2, v0.19) defines at the levels muster
reads, and, below them, what is opaque (a known field whose contents muster neither reads nor
checks: a container's `securityContext`, a Workload's `status`). A field outside the table is
a typo or from another version (`suspnd`, `resourceGroup`). Kinds without a schema here are
not checked. docs/input-validation.md lists which levels are checked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from muster.api.errors import key_path

Fields = Mapping[str, "Fields | None"]  # field -> its own fields, or None: opaque


def _fields(*opaque: str, **nested: Fields | None) -> dict[str, Fields | None]:
    return {**dict.fromkeys(opaque), **nested}


# --- Kubernetes (k8s.io/api core/v1, batch/v1, scheduling) ------------------------------------

_OWNER_REFERENCE = _fields("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")
OBJECT_META: Final = _fields(
    "name", "generateName", "namespace", "uid", "labels", "annotations", "finalizers",
    "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
    "deletionGracePeriodSeconds", "managedFields", "selfLink",
    ownerReferences=_OWNER_REFERENCE,
)  # fmt: skip
_TOLERATION = _fields("key", "operator", "value", "effect", "tolerationSeconds")
_TAINT = _fields("key", "value", "effect", "timeAdded")
_LABEL_SELECTOR = _fields("matchLabels", matchExpressions=_fields("key", "operator", "values"))
_NODE_SELECTOR_REQUIREMENT = _fields("key", "operator", "values")
_AFFINITY = _fields(
    "podAffinity",
    "podAntiAffinity",
    nodeAffinity=_fields(
        "preferredDuringSchedulingIgnoredDuringExecution",
        requiredDuringSchedulingIgnoredDuringExecution=_fields(
            nodeSelectorTerms=_fields(
                matchExpressions=_NODE_SELECTOR_REQUIREMENT,
                matchFields=_NODE_SELECTOR_REQUIREMENT,
            )
        ),
    ),
)
_RESOURCES = _fields("claims", "limits", "requests")
_LIMIT_RANGE_ITEM = _fields(
    "type", "max", "min", "default", "defaultRequest", "maxLimitRequestRatio"
)
_CONTAINER = _fields(
    "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle",
    "livenessProbe", "name", "ports", "readinessProbe", "resizePolicy", "restartPolicy",
    "restartPolicyRules", "securityContext", "startupProbe", "stdin", "stdinOnce",
    "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices",
    "volumeMounts", "workingDir",
    resources=_RESOURCES,
)  # fmt: skip
POD_SPEC: Final = _fields(
    "activeDeadlineSeconds", "automountServiceAccountToken", "dnsConfig", "dnsPolicy",
    "enableServiceLinks", "ephemeralContainers", "hostAliases", "hostIPC", "hostNetwork",
    "hostPID", "hostUsers", "hostname", "hostnameOverride", "imagePullSecrets", "nodeName",
    "nodeSelector", "os", "overhead", "preemptionPolicy", "priority", "priorityClassName",
    "readinessGates", "resourceClaims", "restartPolicy", "runtimeClassName", "schedulerName",
    "schedulingGates", "schedulingGroup", "securityContext", "serviceAccount",
    "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace", "subdomain",
    "terminationGracePeriodSeconds", "topologySpreadConstraints", "volumes", "workloadRef",
    "evictionResponders",
    containers=_CONTAINER,
    initContainers=_CONTAINER,
    tolerations=_TOLERATION,
    affinity=_AFFINITY,
    resources=_RESOURCES,
)  # fmt: skip
POD_TEMPLATE: Final = _fields(metadata=OBJECT_META, spec=POD_SPEC)
# Today's gang API (scheduling.k8s.io v1alpha2, v1beta1, v1alpha3): what a group, its template
# and a Job's spec.scheduling say about scheduling their members.
_SCHEDULING_POLICY = _fields(basic=_fields(), gang=_fields("minCount", "minGroupCount"))
_SCHEDULING_CONSTRAINTS = _fields(topology=_fields("key"))
_DISRUPTION_MODE = _fields(single=_fields(), all=_fields())
_GROUP_POLICY_V1ALPHA2 = _fields(
    "resourceClaims", "disruptionMode", "priorityClassName", "priority",
    schedulingPolicy=_SCHEDULING_POLICY, schedulingConstraints=_SCHEDULING_CONSTRAINTS,
)  # fmt: skip
_GROUP_POLICY = _fields(
    "resourceClaims", "priorityClassName", "priority", "preemptionPolicy",
    schedulingPolicy=_SCHEDULING_POLICY, schedulingConstraints=_SCHEDULING_CONSTRAINTS,
    disruptionMode=_DISRUPTION_MODE,
)  # fmt: skip
_CONTROLLER_REF = _fields("apiGroup", "kind", "name")


# A v1.37 Workload's templates; a composite one holds templates again (a recursive schema:
# the decoder names a depth over 4 better than "unknown field" would).
_COMPOSITE_TEMPLATE = _fields("name", **_GROUP_POLICY)
_GROUP_TEMPLATES = _fields(
    podGroupTemplates=_fields("name", **_GROUP_POLICY),
    compositePodGroupTemplates=_COMPOSITE_TEMPLATE,
)
_COMPOSITE_TEMPLATE.update(_GROUP_TEMPLATES)
_GROUP_WORKLOAD_SPEC = _fields(controllerRef=_CONTROLLER_REF, **_GROUP_TEMPLATES)
_GROUP_SPEC = _fields(
    "parentCompositePodGroupName",
    workloadRef=_fields("workloadName", "templateName"),
    **_GROUP_POLICY,
)  # fmt: skip
_JOB_SCHEDULING = _fields(
    schedulingPolicy=_SCHEDULING_POLICY,
    schedulingConstraints=_SCHEDULING_CONSTRAINTS,
    disruptionMode=_DISRUPTION_MODE,
)
_JOB_SPEC = _fields(
    "activeDeadlineSeconds", "backoffLimit", "backoffLimitPerIndex", "completionMode",
    "completions", "managedBy", "manualSelector", "maxFailedIndexes", "parallelism",
    "podFailurePolicy", "podReplacementPolicy", "selector", "successPolicy", "suspend",
    "ttlSecondsAfterFinished",
    template=POD_TEMPLATE,
    scheduling=_JOB_SCHEDULING,
)  # fmt: skip
# jobset.x-k8s.io/v1alpha2: a JobSet's replicatedJobs hold Job templates (checked as a Job's).
_JOBSET_SPEC = _fields(
    "network", "successPolicy", "failurePolicy", "startupPolicy", "suspend", "coordinator",
    "managedBy", "ttlSecondsAfterFinished",
    replicatedJobs=_fields(
        "name", "groupName", "replicas", "dependsOn",
        template=_fields(metadata=OBJECT_META, spec=_JOB_SPEC),
    ),
)  # fmt: skip
_NODE_SPEC = _fields(
    "configSource", "externalID", "podCIDR", "podCIDRs", "podPreemptionPolicy", "providerID",
    "unschedulable",
    taints=_TAINT,
)  # fmt: skip


def _object(*top: str, **nested: Fields) -> dict[str, Fields | None]:
    """A kind's top level: apiVersion, kind, metadata, an opaque status, and its own fields."""
    return _fields("apiVersion", "kind", "status", *top, metadata=OBJECT_META, **nested)


# --- Kueue (kueue.x-k8s.io v1beta1 and v1beta2 together; config.kueue.x-k8s.io) ----------------

_RESOURCE_GROUP = _fields(
    "coveredResources",
    flavors=_fields(
        "name", resources=_fields("name", "nominalQuota", "borrowingLimit", "lendingLimit")
    ),
)
_FAIR_SHARING = _fields("weight")
_CLUSTER_QUEUE_SPEC = _fields(
    "cohort", "cohortName", "queueingStrategy", "admissionChecks", "stopPolicy",
    "concurrentAdmissionPolicy",
    admissionScope=_fields("admissionMode"),
    resourceGroups=_RESOURCE_GROUP,
    namespaceSelector=_LABEL_SELECTOR,
    flavorFungibility=_fields("whenCanBorrow", "whenCanPreempt", "preference"),
    preemption=_fields(
        "reclaimWithinCohort", "withinClusterQueue",
        borrowWithinCohort=_fields("policy", "maxPriorityThreshold"),
    ),
    admissionChecksStrategy=_fields(admissionChecks=_fields("name", "onFlavors")),
    fairSharing=_FAIR_SHARING,
)  # fmt: skip
_WORKLOAD_SPEC = _fields(
    "queueName", "priorityClassName", "priority", "priorityClassSource", "active",
    "maximumExecutionTimeSeconds", "preemptionGates",
    podSets=_fields("name", "count", "minCount", "topologyRequest", template=POD_TEMPLATE),
    priorityClassRef=_fields("group", "kind", "name"),
)  # fmt: skip
_CONFIGURATION = _fields(
    "apiVersion", "kind", "namespace", "webhook", "leaderElection", "metrics", "health",
    "pprofBindAddress", "controller", "tls", "manageJobsWithoutQueueName",
    "managedJobsNamespaceSelector", "internalCertManagement", "clientConnection",
    "integrations", "queueVisibility", "multiKueue", "resources",
    "featureGates", "objectRetentionPolicies", "visibilityServer",
    waitForPodsReady=_fields(
        "enable", "timeout", "blockAdmission", "recoveryTimeout",
        requeuingStrategy=_fields(
            "timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"
        ),
    ),
    fairSharing=_fields("enable", "preemptionStrategies"),
    admissionFairSharing=_fields("usageHalfLifeTime", "usageSamplingInterval", "resourceWeights"),
)  # fmt: skip

_KUEUE: Final[dict[str, Fields]] = {
    "ResourceFlavor": _object(
        spec=_fields("nodeLabels", "topologyName", nodeTaints=_TAINT, tolerations=_TOLERATION)
    ),
    "ClusterQueue": _object(spec=_CLUSTER_QUEUE_SPEC),
    "Cohort": _object(
        spec=_fields(
            "parent", "parentName", resourceGroups=_RESOURCE_GROUP, fairSharing=_FAIR_SHARING
        )
    ),
    "LocalQueue": _object(spec=_fields("clusterQueue", "stopPolicy", fairSharing=_FAIR_SHARING)),
    "WorkloadPriorityClass": _object("value", "description"),
    "AdmissionCheck": _object(
        spec=_fields(
            "controllerName", "retryDelayMinutes", parameters=_fields("apiGroup", "kind", "name")
        )
    ),
    "Workload": _object(spec=_WORKLOAD_SPEC),
    "MultiKueueConfig": _object(spec=_fields("clusters", "quotaManagement")),
    "MultiKueueCluster": _object(spec=_fields("kubeConfig", "clusterSource", "clusterProfileRef")),
}
SCHEMAS: Final[dict[tuple[str, str], Fields]] = {
    **{(f"kueue.x-k8s.io/{v}", k): s for v in ("v1beta1", "v1beta2") for k, s in _KUEUE.items()},
    ("config.kueue.x-k8s.io/v1beta1", "Configuration"): _CONFIGURATION,
    ("config.kueue.x-k8s.io/v1beta2", "Configuration"): _CONFIGURATION,
    ("batch/v1", "Job"): _object(spec=_JOB_SPEC),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): _object(spec=_JOBSET_SPEC),
    ("v1", "Pod"): _object(spec=POD_SPEC),
    ("v1", "Node"): _object(spec=_NODE_SPEC),
    ("v1", "Namespace"): _object("spec"),
    ("v1", "LimitRange"): _object(spec=_fields(limits=_LIMIT_RANGE_ITEM)),
    ("node.k8s.io/v1", "RuntimeClass"): _object(
        "handler", overhead=_fields("podFixed"), scheduling=_fields("nodeSelector", "tolerations")
    ),
    ("scheduling.k8s.io/v1", "PriorityClass"): _object(
        "value", "globalDefault", "description", "preemptionPolicy"
    ),
    ("scheduling.k8s.io/v1alpha1", "Workload"): _object(
        spec=_fields(
            podGroups=_fields("name", policy=_fields("basic", gang=_fields("minCount"))),
            controllerRef=_fields("apiGroup", "kind", "name"),
        )
    ),
    ("scheduling.k8s.io/v1alpha2", "Workload"): _object(
        spec=_fields(
            controllerRef=_CONTROLLER_REF,
            podGroupTemplates=_fields("name", **_GROUP_POLICY_V1ALPHA2),
        )
    ),
    ("scheduling.k8s.io/v1alpha2", "PodGroup"): _object(
        spec=_fields(
            podGroupTemplateRef=_fields(workload=_fields("workloadName", "podGroupTemplateName")),
            **_GROUP_POLICY_V1ALPHA2,
        )
    ),
    **{
        (f"scheduling.k8s.io/{version}", kind): _object(spec=spec)
        for version in ("v1beta1", "v1alpha3")
        for kind, spec in (("Workload", _GROUP_WORKLOAD_SPEC), ("PodGroup", _GROUP_SPEC))
    },
    ("scheduling.k8s.io/v1alpha3", "CompositePodGroup"): _object(spec=_GROUP_SPEC),
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): _object(
        spec=_fields("minMember", "minResources", "scheduleTimeoutSeconds")
    ),
}  # fmt: skip


def unknown_fields(doc: Mapping[str, Any], fields: Fields) -> Iterator[str]:
    """The path of every field of `doc` outside `fields`, in document order.

    Lists apply their field's schema to each item; a value of the wrong shape (a string where
    a map belongs) is left to the decoder, which names it better. Paths are kept as their
    parts and spelled only for an unknown field: nearly every document has none. It runs on
    every Submit: a stack (last in, first out, so children are pushed in reverse), not a
    queue taken from its front, and no recursion (lists may nest without a schema's bound).
    """
    todo: list[tuple[Any, Fields, tuple[str | int, ...]]] = [(doc, fields, ())]
    while todo:
        value, schema, path = todo.pop()
        if isinstance(value, list):
            todo += [(value[i], schema, (*path, i)) for i in reversed(range(len(value)))]
            continue
        if not isinstance(value, dict):
            continue
        nested: list[tuple[Any, Fields, tuple[str | int, ...]]] = []
        for key, child in value.items():
            if key not in schema:
                yield _spelled(path, str(key))
                continue
            sub = schema[key]
            if sub is not None and isinstance(child, _CONTAINERS):
                nested.append((child, sub, (*path, key)))
        nested.reverse()
        todo += nested


_CONTAINERS: Final = (dict, list)


def _spelled(parts: tuple[str | int, ...], last: str) -> str:
    """The path of field `last` under `parts` (map keys, list indexes) as messages write it."""
    text = ""
    for part in parts:
        text = f"{text}[{part}]" if isinstance(part, int) else key_path(text, part)
    return key_path(text, last)
