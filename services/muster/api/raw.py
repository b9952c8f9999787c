"""Wire-shaped msgspec structs: Kueue, batch/v1, core and gang objects exactly as written in YAML.

`muster.api.decode` converts a document into one of these (msgspec reports structural errors
with a path), then `muster.api.convert`, `muster.api.job` and `muster.api.cluster_objects`
build the normalized model. One set of structs serves v1beta1 and v1beta2: where the
versions spell a field differently both spellings are declared, and conversion picks. Unknown
fields are ignored, as Kubernetes clients do. Maps of quantities stay `Any` here so that a
bad entry is reported with its key.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from muster.api.model import (
    AdmissionMode,
    BorrowWithinCohortPolicy,
    FairSharingStrategy,
    QueueingStrategy,
    ReclaimWithinCohort,
    StopPolicy,
    WithinClusterQueue,
)
from muster.api.wellknown import DEFAULT_SCHEDULER

Quantity = str | int | float
QuantityMap = dict[str, Any]  # parsed entry by entry, so each error names its resource
# Kubernetes' integer widths: a value outside them is a field error here, never an overflow in
# a protobuf field or an int64 table downstream.
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Wire(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=False):
    """Base of every wire struct: camelCase names as in YAML, unknown fields ignored."""


# --- metadata and core pieces -----------------------------------------------------------------


class RawOwnerReference(Wire):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class RawMeta(Wire):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: str | None = None
    generation: Int64 = 1
    owner_references: list[RawOwnerReference] = []


class Document(Wire):
    """What every object has; kind-specific structs add `spec`, `status` or top-level fields."""

    api_version: str = ""
    kind: str = ""
    metadata: RawMeta = msgspec.field(default_factory=RawMeta)


class RawTaint(Wire, kw_only=True):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class RawToleration(Wire):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: Int64 | None = None


class RawLabelSelectorRequirement(Wire):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []


class RawLabelSelector(Wire):
    match_labels: dict[str, str] = {}
    match_expressions: list[RawLabelSelectorRequirement] = []


class RawNodeSelectorRequirement(Wire):
    key: str
    operator: str  # In NotIn Exists DoesNotExist Gt Lt; checked in conversion for a clear message
    values: list[str] = []


class RawNodeSelectorTerm(Wire):
    match_expressions: list[RawNodeSelectorRequirement] = []
    match_fields: list[RawNodeSelectorRequirement] = []


class RawNodeSelector(Wire):
    node_selector_terms: list[RawNodeSelectorTerm] = []


class RawNodeAffinity(Wire):
    required_during_scheduling_ignored_during_execution: RawNodeSelector | None = None


class RawAffinity(Wire):
    node_affinity: RawNodeAffinity | None = None


class RawResourceRequirements(Wire):
    requests: QuantityMap = {}
    limits: QuantityMap = {}


class RawContainer(Wire):
    name: str = ""
    resources: RawResourceRequirements = msgspec.field(default_factory=RawResourceRequirements)
    restart_policy: str | None = None  # "Always" on an init container makes it a sidecar


class RawSchedulingGroup(Wire):
    """A pod's `spec.schedulingGroup` (Kubernetes v1.36+): the PodGroup it joins."""

    pod_group_name: str = ""  # required; conversion names it when missing


class RawPodSpec(Wire):
    containers: list[RawContainer] = []
    init_containers: list[RawContainer] = []
    overhead: QuantityMap = {}
    resources: RawResourceRequirements | None = None  # pod-level (PodLevelResources)
    runtime_class_name: str | None = None
    node_selector: dict[str, str] = {}
    tolerations: list[RawToleration] = []
    affinity: RawAffinity | None = None
    priority_class_name: str | None = None
    scheduling_group: RawSchedulingGroup | None = None


class RawTemplateMeta(Wire):
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class RawPodTemplate(Wire):
    metadata: RawTemplateMeta = msgspec.field(default_factory=RawTemplateMeta)
    spec: RawPodSpec = msgspec.field(default_factory=RawPodSpec)


# --- Kueue quota objects ----------------------------------------------------------------------


class RawResourceQuota(Wire):
    name: str
    nominal_quota: Any  # a quantity
    borrowing_limit: Any = None
    lending_limit: Any = None


class RawFlavorQuotas(Wire):
    name: str
    resources: list[RawResourceQuota] = []


class RawResourceGroup(Wire):
    covered_resources: list[str] = []
    flavors: list[RawFlavorQuotas] = []


class RawFairSharing(Wire):
    weight: Any = None  # a quantity; may be fractional ("0.5")


class RawAdmissionScope(Wire):
    admission_mode: AdmissionMode | None = None


class RawBorrowWithinCohort(Wire):
    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    max_priority_threshold: Int32 | None = None


class RawPreemption(Wire):
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: RawBorrowWithinCohort | None = None


class RawFlavorFungibility(Wire):
    # v1beta1 also spells MayStopSearch as Borrow / Preempt; conversion maps or rejects them.
    when_can_borrow: Literal["Borrow", "MayStopSearch", "TryNextFlavor"] | None = None
    when_can_preempt: Literal["Preempt", "MayStopSearch", "TryNextFlavor"] | None = None
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class RawAdmissionCheckStrategyRule(Wire):
    name: str
    on_flavors: list[str] = []


class RawAdmissionChecksStrategy(Wire):
    admission_checks: list[RawAdmissionCheckStrategyRule] = []


class RawClusterQueueSpec(Wire):
    resource_groups: list[RawResourceGroup] = []
    cohort: str | None = None  # v1beta1
    cohort_name: str | None = None  # v1beta2
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    namespace_selector: RawLabelSelector | None = None
    preemption: RawPreemption | None = None
    flavor_fungibility: RawFlavorFungibility | None = None
    admission_checks: list[str] | None = None  # v1beta1 only in Kueue; accepted in both
    admission_checks_strategy: RawAdmissionChecksStrategy | None = None
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_sharing: RawFairSharing | None = None
    admission_scope: RawAdmissionScope | None = None


class RawClusterQueue(Document):
    spec: RawClusterQueueSpec = msgspec.field(default_factory=RawClusterQueueSpec)


class RawCohortSpec(Wire):
    parent: str | None = None  # v1beta1
    parent_name: str | None = None  # v1beta2
    resource_groups: list[RawResourceGroup] = []
    fair_sharing: RawFairSharing | None = None


class RawCohort(Document):
    spec: RawCohortSpec = msgspec.field(default_factory=RawCohortSpec)


class RawResourceFlavorSpec(Wire):
    node_labels: dict[str, str] = {}
    node_taints: list[RawTaint] = []
    tolerations: list[RawToleration] = []
    topology_name: str | None = None


class RawResourceFlavor(Document):
    spec: RawResourceFlavorSpec = msgspec.field(default_factory=RawResourceFlavorSpec)


class RawLocalQueueSpec(Wire):
    cluster_queue: str
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_sharing: RawFairSharing | None = None


class RawLocalQueue(Document, kw_only=True):
    spec: RawLocalQueueSpec


class RawWorkloadPriorityClass(Document, kw_only=True):
    value: Int32
    description: str = ""


class RawPriorityClass(Document, kw_only=True):
    value: Int32
    global_default: bool = False
    description: str = ""


class RawAdmissionCheckParametersReference(Wire):
    api_group: str = ""
    kind: str = ""
    name: str = ""


class RawAdmissionCheckSpec(Wire):
    controller_name: str = ""
    parameters: RawAdmissionCheckParametersReference | None = None


class RawAdmissionCheck(Document):
    spec: RawAdmissionCheckSpec = msgspec.field(default_factory=RawAdmissionCheckSpec)


class RawNamespace(Document):
    pass


class RawLimitRangeItem(Wire):
    type: str = ""
    max: QuantityMap = {}
    min: QuantityMap = {}
    default: QuantityMap = {}
    default_request: QuantityMap = {}
    max_limit_request_ratio: QuantityMap = {}


class RawLimitRangeSpec(Wire):
    limits: list[RawLimitRangeItem] = []


class RawLimitRange(Document):
    spec: RawLimitRangeSpec = msgspec.field(default_factory=RawLimitRangeSpec)


class RawOverhead(Wire):
    pod_fixed: QuantityMap = {}


class RawScheduling(Wire):
    node_selector: dict[str, str] = {}
    tolerations: list[RawToleration] = []


class RawRuntimeClass(Document):
    handler: str = ""
    overhead: RawOverhead | None = None
    scheduling: RawScheduling | None = None


class RawMultiKueueConfigSpec(Wire):
    clusters: list[str] = []


class RawMultiKueueConfig(Document):
    spec: RawMultiKueueConfigSpec = msgspec.field(default_factory=RawMultiKueueConfigSpec)


class RawKubeConfig(Wire):
    location: str = ""
    location_type: str = "Secret"  # Kueue's default


class RawClusterProfileRef(Wire):
    name: str = ""


class RawClusterSource(Wire):
    kube_config: RawKubeConfig | None = None
    cluster_profile_ref: RawClusterProfileRef | None = None


class RawMultiKueueClusterSpec(Wire):
    kube_config: RawKubeConfig | None = None  # v1beta1
    cluster_source: RawClusterSource | None = None  # v1beta2
    cluster_profile_ref: RawClusterProfileRef | None = None  # v1beta1, kept for conversion


class RawMultiKueueCluster(Document):
    """Where the worker's API server is: a kubeconfig in a Secret or a file (`spec.kubeConfig`
    in v1beta1, `spec.clusterSource.kubeConfig` in v1beta2)."""

    spec: RawMultiKueueClusterSpec = msgspec.field(default_factory=RawMultiKueueClusterSpec)


# --- workloads --------------------------------------------------------------------------------


class RawPodSet(Wire):
    name: str = "main"
    count: Int32 = 1
    min_count: Int32 | None = None
    template: RawPodTemplate = msgspec.field(default_factory=RawPodTemplate)


class RawPriorityClassRef(Wire):
    group: str = ""
    kind: str = ""
    name: str = ""


class RawWorkloadSpec(Wire):
    pod_sets: list[RawPodSet] = []
    queue_name: str = ""
    priority: Int32 | None = None
    priority_class_name: str | None = None  # v1beta1
    priority_class_source: str | None = None  # v1beta1
    priority_class_ref: RawPriorityClassRef | None = None  # v1beta2
    active: bool = True


class RawPodSetAssignment(Wire):
    name: str = "main"
    flavors: dict[str, str] = {}
    count: Int32 | None = None
    resource_usage: QuantityMap = {}


class RawAdmission(Wire):
    cluster_queue: str
    pod_set_assignments: list[RawPodSetAssignment] = []


class RawCondition(Wire):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""


class RawAdmissionCheckState(Wire):
    name: str
    state: Literal["Pending", "Ready", "Retry", "Rejected"] = "Pending"
    message: str = ""
    retry_count: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] = 0  # int32, as Kueue


class RawReclaimablePod(Wire):
    name: str
    count: int


class RawWorkloadStatus(Wire):
    admission: RawAdmission | None = None
    conditions: list[RawCondition] = []
    admission_checks: list[RawAdmissionCheckState] = []
    reclaimable_pods: list[RawReclaimablePod] = []


class RawWorkload(Document):
    spec: RawWorkloadSpec = msgspec.field(default_factory=RawWorkloadSpec)
    status: RawWorkloadStatus = msgspec.field(default_factory=RawWorkloadStatus)


# --- scheduling.k8s.io policy pieces (v1alpha2+), shared by PodGroups, their templates and a
# Job's `spec.scheduling`; the documents themselves are in `muster.api.scheduling_raw`.


class RawGang(Wire):
    min_count: int | None = None  # pods; optional only in a Job's spec.scheduling
    min_group_count: int | None = None  # child groups of a CompositePodGroup


class RawEmpty(Wire):
    pass


class RawSchedulingPolicy(Wire):
    """A union: exactly one of `basic` and `gang` (conversion checks)."""

    basic: RawEmpty | None = None
    gang: RawGang | None = None


class RawTopologyConstraint(Wire):
    key: str = ""


class RawSchedulingConstraints(Wire):
    topology: list[RawTopologyConstraint] = []


class RawDisruptionMode(Wire):
    """v1.37's union (`single: {}` or `all: {}`); v1.36 wrote a string (`Pod`, `PodGroup`)."""

    single: RawEmpty | None = None
    all: RawEmpty | None = None


class RawJobScheduling(Wire):
    """A Job's `spec.scheduling` (Kubernetes v1.37, gate WorkloadWithJob)."""

    scheduling_policy: RawSchedulingPolicy | None = None
    scheduling_constraints: RawSchedulingConstraints | None = None
    disruption_mode: RawDisruptionMode | None = None
    resource_claims: list[dict[str, Any]] = []


class RawJobSpec(Wire):
    parallelism: Int32 | None = None
    completions: Int32 | None = None
    completion_mode: Literal["NonIndexed", "Indexed"] | None = None
    template: RawPodTemplate = msgspec.field(default_factory=RawPodTemplate)
    scheduling: RawJobScheduling | None = None


class RawJobStatus(Wire):
    """What a Job's status says of its finished pods (Kueue's reclaimable pods)."""

    succeeded: Int32 = 0
    completed_indexes: str = ""
    failed_indexes: str | None = None


class RawJob(Document):
    spec: RawJobSpec = msgspec.field(default_factory=RawJobSpec)
    status: RawJobStatus = msgspec.field(default_factory=RawJobStatus)


# --- jobset.x-k8s.io/v1alpha2 JobSet: what Kueue's JobSet integration reads of it ------------


class RawJobTemplate(Wire):
    spec: RawJobSpec = msgspec.field(default_factory=RawJobSpec)


class RawReplicatedJob(Wire):
    name: str = ""
    replicas: Int32 = 1  # JobSet's default
    template: RawJobTemplate = msgspec.field(default_factory=RawJobTemplate)


class RawJobSetSpec(Wire):
    replicated_jobs: list[RawReplicatedJob] = []
    suspend: bool | None = None
    managed_by: str | None = None


class RawReplicatedJobStatus(Wire):
    """How many of a replicatedJob's child Jobs are in each state (Kueue's reclaimable pods
    and PodsReady)."""

    name: str = ""
    ready: Int32 = 0
    succeeded: Int32 = 0


class RawJobSetStatus(Wire):
    replicated_jobs_status: list[RawReplicatedJobStatus] = []


class RawJobSet(Document):
    spec: RawJobSetSpec = msgspec.field(default_factory=RawJobSetSpec)
    status: RawJobSetStatus = msgspec.field(default_factory=RawJobSetStatus)


# --- cluster objects: v1 Node and Pod, the Workload API, scheduler-plugins' PodGroup -------

PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


class RawStatusCondition(Wire):
    """A Node's or Pod's condition; unlike a Workload's, a missing status reads as Unknown."""

    type: str
    status: Literal["True", "False", "Unknown"] = "Unknown"
    reason: str = ""
    message: str = ""


class RawNodeSpec(Wire):
    taints: list[RawTaint] = msgspec.field(default_factory=list)
    unschedulable: bool = False


class RawNodeStatus(Wire):
    capacity: QuantityMap = msgspec.field(default_factory=dict)
    allocatable: QuantityMap = msgspec.field(default_factory=dict)
    conditions: list[RawStatusCondition] = msgspec.field(default_factory=list)


class RawNode(Document):
    spec: RawNodeSpec = msgspec.field(default_factory=RawNodeSpec)
    status: RawNodeStatus = msgspec.field(default_factory=RawNodeStatus)


class RawWorkloadReference(Wire):
    # Required in Kubernetes; empty here so conversion names the missing field.
    name: str = ""
    pod_group: str = ""
    pod_group_replica_key: str = ""


class RawPodFullSpec(RawPodSpec):
    """A Pod's spec: a template's, plus what only a Pod has."""

    scheduler_name: str = DEFAULT_SCHEDULER
    node_name: str = ""
    priority: Int32 | None = None
    workload_ref: RawWorkloadReference | None = None


class RawPodStatus(Wire):
    phase: PodPhase = "Pending"
    start_time: str | None = None
    reason: str = ""
    message: str = ""
    conditions: list[RawStatusCondition] = msgspec.field(default_factory=list)


class RawPod(Document):
    spec: RawPodFullSpec = msgspec.field(default_factory=RawPodFullSpec)
    status: RawPodStatus = msgspec.field(default_factory=RawPodStatus)


class RawGangSchedulingPolicy(Wire):
    min_count: Int32 | None = None  # required; conversion reports it missing


class RawBasicSchedulingPolicy(Wire):
    pass


class RawPodGroupPolicy(Wire):
    basic: RawBasicSchedulingPolicy | None = None
    gang: RawGangSchedulingPolicy | None = None


class RawWorkloadPodGroup(Wire):
    name: str = ""
    policy: RawPodGroupPolicy | None = None


class RawTypedLocalObjectReference(Wire):
    api_group: str = ""
    kind: str = ""
    name: str = ""


class RawSchedulingWorkloadSpec(Wire):
    pod_groups: list[RawWorkloadPodGroup] = []
    controller_ref: RawTypedLocalObjectReference | None = None


class RawSchedulingWorkload(Document):
    """scheduling.k8s.io/v1alpha1 Workload (Kubernetes v1.35), not Kueue's."""

    spec: RawSchedulingWorkloadSpec = msgspec.field(default_factory=RawSchedulingWorkloadSpec)


class RawPodGroupSpec(Wire):
    min_member: Int32 | None = None
    schedule_timeout_seconds: Int32 | None = None


class RawPodGroup(Document):
    """scheduler-plugins' scheduling.x-k8s.io/v1alpha1 PodGroup."""

    spec: RawPodGroupSpec = msgspec.field(default_factory=RawPodGroupSpec)


# --- Kueue's Configuration --------------------------------------------------------------------


class RawFairSharingConfig(Wire):
    enable: bool | None = None  # v1beta1; v1beta2 enables by presence
    preemption_strategies: list[FairSharingStrategy] | None = None


class RawAdmissionFairSharing(Wire):
    usage_half_life_time: str | None = None  # Go duration
    usage_sampling_interval: str | None = None  # Go duration
    resource_weights: dict[str, float] = {}


class RawRequeuingStrategy(Wire):
    timestamp: Literal["Eviction", "Creation"] | None = None
    backoff_limit_count: Int32 | None = None
    backoff_base_seconds: Int32 | None = None
    backoff_max_seconds: Int32 | None = None


class RawWaitForPodsReady(Wire):
    enable: bool | None = None  # v1beta1; v1beta2 enables by presence
    timeout: str | None = None  # Go duration: "5m", "1h30m"
    recovery_timeout: str | None = None  # Go duration; "0s" turns it off
    block_admission: bool | None = None
    requeuing_strategy: RawRequeuingStrategy | None = None


class RawConfiguration(Document):
    fair_sharing: RawFairSharingConfig | None = None
    wait_for_pods_ready: RawWaitForPodsReady | None = None
    admission_fair_sharing: RawAdmissionFairSharing | None = None
    feature_gates: dict[str, bool] = {}
