"""Normalized, version-independent objects that muster decides on.

`muster.api.decode` turns Kueue YAML (v1beta1 or v1beta2), batch/v1 Jobs and v1 Namespaces into
these structs; `muster.core` reads only these. Every resource amount is an integer number of
milli-units (`MilliUnits`): 1 cpu = 1000, 1Gi of memory = 1073741824000, so that sums and
comparisons are exact.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from enum import StrEnum
from typing import Literal, NewType

import msgspec

MilliUnits = NewType("MilliUnits", int)
Resources = Mapping[str, int]  # resource name -> MilliUnits; frozen dicts by convention
WorkloadKey = NewType("WorkloadKey", str)  # "<namespace>/<name>"


class Frozen(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False, gc=False):
    """Base of every model struct: immutable, keyword-only.

    gc=False: immutable values never form reference cycles, and untracking the hundreds of
    thousands a large simulation creates keeps the garbage collector off the hot path.
    """


# --- shared pieces ---------------------------------------------------------------------------


class OwnerReference(Frozen, frozen=True, kw_only=True):
    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


class ObjectMeta(Frozen, frozen=True, kw_only=True):
    name: str
    namespace: str = ""
    uid: str = ""
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    creation_timestamp: str | None = None  # RFC 3339 as written
    generation: int = 1
    owner_references: tuple[OwnerReference, ...] = ()


class Taint(Frozen, frozen=True, kw_only=True):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Toleration(Frozen, frozen=True, kw_only=True):
    key: str = ""  # empty key with operator Exists tolerates everything
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""  # empty matches every effect


class LabelSelectorRequirement(Frozen, frozen=True, kw_only=True):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


class LabelSelector(Frozen, frozen=True, kw_only=True):
    """A Kubernetes label selector; an empty one matches everything."""

    match_labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


# --- Kueue configuration objects -------------------------------------------------------------


class ResourceFlavor(Frozen, frozen=True, kw_only=True):
    meta: ObjectMeta
    node_labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str | None = None

    @property
    def name(self) -> str:
        return self.meta.name


class ResourceQuota(Frozen, frozen=True, kw_only=True):
    name: str  # resource name, e.g. "cpu"
    nominal_quota: int  # MilliUnits
    borrowing_limit: int | None = None  # None: unlimited (within the cohort)
    lending_limit: int | None = None  # None: everything unused may be lent


class FlavorQuotas(Frozen, frozen=True, kw_only=True):
    name: str  # ResourceFlavor name
    resources: tuple[ResourceQuota, ...]


class ResourceGroup(Frozen, frozen=True, kw_only=True):
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]  # in preference order


class QueueingStrategy(StrEnum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class WithinClusterQueue(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class BorrowWithinCohort(Frozen, frozen=True, kw_only=True):
    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    max_priority_threshold: int | None = None


class Preemption(Frozen, frozen=True, kw_only=True):
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohort = msgspec.field(default_factory=BorrowWithinCohort)


class FungibilityPolicy(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"  # v1beta1 "Borrow" / "Preempt"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FlavorFungibilityPreference(StrEnum):
    """Which of two viable flavors wins: the one that borrows less, or the one that preempts
    less (Kueue's flavorFungibility.preference)."""

    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class FlavorFungibility(Frozen, frozen=True, kw_only=True):
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FlavorFungibilityPreference = FlavorFungibilityPreference.BORROWING_OVER_PREEMPTION


class AdmissionMode(StrEnum):
    USAGE_BASED = "UsageBasedAdmissionFairSharing"
    NONE = "NoAdmissionFairSharing"


class StopPolicy(StrEnum):
    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class AdmissionCheckStrategyRule(Frozen, frozen=True, kw_only=True):
    name: str
    on_flavors: tuple[str, ...] = ()  # empty: every flavor


class ClusterQueue(Frozen, frozen=True, kw_only=True):
    meta: ObjectMeta
    cohort: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    # None (field absent) matches no namespace, as in Kueue; an empty selector matches all.
    namespace_selector: LabelSelector | None = None
    preemption: Preemption = msgspec.field(default_factory=Preemption)
    flavor_fungibility: FlavorFungibility = msgspec.field(default_factory=FlavorFungibility)
    admission_checks: tuple[AdmissionCheckStrategyRule, ...] = ()  # both spellings, merged
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_sharing_weight: float = 1.0
    # spec.admissionScope.admissionMode; None when absent (no admission fair sharing)
    admission_mode: AdmissionMode | None = None

    @property
    def name(self) -> str:
        return self.meta.name


class Cohort(Frozen, frozen=True, kw_only=True):
    meta: ObjectMeta
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_sharing_weight: float = 1.0

    @property
    def name(self) -> str:
        return self.meta.name


class LocalQueue(Frozen, frozen=True, kw_only=True):
    meta: ObjectMeta
    cluster_queue: str
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_sharing_weight: float = 1.0  # divides its admission fair sharing usage

    @property
    def key(self) -> str:
        return f"{self.meta.namespace}/{self.meta.name}"


class WorkloadPriorityClass(Frozen, frozen=True, kw_only=True):
    meta: ObjectMeta
    value: int
    description: str = ""


class PriorityClass(Frozen, frozen=True, kw_only=True):
    """scheduling.k8s.io/v1 PriorityClass, used when a workload names one instead of a WPC."""

    meta: ObjectMeta
    value: int
    global_default: bool = False


class AdmissionCheckParameters(Frozen, frozen=True, kw_only=True):
    """An AdmissionCheck's `spec.parameters`: the object that configures its controller."""

    api_group: str = ""
    kind: str = ""
    name: str = ""


class AdmissionCheck(Frozen, frozen=True, kw_only=True):
    meta: ObjectMeta
    controller_name: str = ""
    parameters: AdmissionCheckParameters | None = None


# --- MultiKueue: the worker clusters a ClusterQueue dispatches to (issue 6) ------------------

DispatchStrategy = Literal["first-fit", "best-fit"]


class MultiKueueConfig(Frozen, frozen=True, kw_only=True):
    """The worker clusters of a MultiKueue admission check, in the order dispatch tries them.

    `dispatch` (annotation `muster.dev/dispatch`) picks among those with room: the first
    listed, or the one left with the most room (docs/multicluster.md).
    """

    meta: ObjectMeta
    clusters: tuple[str, ...] = ()
    dispatch: DispatchStrategy = "first-fit"


KubeConfigLocation = Literal["Secret", "Path"]


class KubeConfigRef(Frozen, frozen=True, kw_only=True):
    """Where a worker's kubeconfig is: key `kubeconfig` of Secret `location` in muster's
    namespace, or the file at path `location` (Kueue's MultiKueueCluster `kubeConfig`)."""

    location: str
    location_type: KubeConfigLocation = "Secret"


class MultiKueueCluster(Frozen, frozen=True, kw_only=True):
    """A worker cluster; its name is the muster cluster id its services run with, and
    `kube_config` where they find its API server when they serve it from the manager's side
    (None: its services run inside it, docs/multicluster.md)."""

    meta: ObjectMeta
    kube_config: KubeConfigRef | None = None

    @property
    def name(self) -> str:
        return self.meta.name


class Namespace(Frozen, frozen=True, kw_only=True):
    meta: ObjectMeta


class LimitRangeItem(Frozen, frozen=True, kw_only=True):
    """One entry of a v1 LimitRange's spec.limits; quantities in milli-units."""

    type: str  # Container, Pod, PersistentVolumeClaim (only the first two bound a workload)
    max: Resources = msgspec.field(default_factory=dict)
    min: Resources = msgspec.field(default_factory=dict)
    default: Resources = msgspec.field(default_factory=dict)  # limits a container leaves unset
    default_request: Resources = msgspec.field(default_factory=dict)
    max_limit_request_ratio: Resources = msgspec.field(default_factory=dict)


class LimitRange(Frozen, frozen=True, kw_only=True):
    """A v1 LimitRange: defaults and bounds for the containers and pods of its namespace."""

    meta: ObjectMeta
    limits: tuple[LimitRangeItem, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.meta.namespace}/{self.meta.name}"


class RuntimeClass(Frozen, frozen=True, kw_only=True):
    """A node.k8s.io/v1 RuntimeClass: what a pod naming it costs beyond its containers
    (`overhead.podFixed`, added to its requests by Kueue and by the API server), and where
    such a pod may run (`scheduling`, merged into the pod by the API server)."""

    meta: ObjectMeta
    handler: str
    overhead: Resources = msgspec.field(default_factory=dict)  # podFixed, milli-units
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)  # scheduling's
    tolerations: tuple[Toleration, ...] = ()  # scheduling's


# --- workloads -------------------------------------------------------------------------------


class ContainerResources(Frozen, frozen=True, kw_only=True):
    """One container's requests and limits as written, apart (a limit is not yet a request)."""

    requests: Resources = msgspec.field(default_factory=dict)
    limits: Resources = msgspec.field(default_factory=dict)
    sidecar: bool = False  # an init container with restartPolicy Always


class PodResources(Frozen, frozen=True, kw_only=True):
    """A pod template's resources container by container, as written: what a namespace's
    LimitRanges default and bound (`muster.core.limit_ranges`) before the per-pod total is
    taken (`muster.api.podspec.requests_of`)."""

    containers: tuple[ContainerResources, ...] = ()
    init_containers: tuple[ContainerResources, ...] = ()
    overhead: Resources = msgspec.field(default_factory=dict)
    # The pod's own spec.resources (PodLevelResources): its cpu, memory and hugepages requests
    # replace the containers' total.
    pod: ContainerResources | None = None
    # The RuntimeClass whose overhead.podFixed is the pod's overhead when it sets none.
    runtime_class_name: str = ""


class PodSet(Frozen, frozen=True, kw_only=True):
    name: str
    count: int
    min_count: int | None = None  # partial admission: the smallest count that is useful
    requests: Resources = msgspec.field(default_factory=dict)  # per pod, MilliUnits
    # The template's containers, when it came from one: `requests` is their total with no
    # LimitRange applied, and the engine takes it again from these when one applies. None for
    # a podset known only by its total (a routed alternative).
    resources: PodResources | None = None
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    # Required node affinity, flattened: a pod fits a flavor if any term matches its labels.
    node_affinity_terms: tuple[LabelSelector, ...] = ()
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)  # pod template's
    scheduling_group: str = ""  # the template's spec.schedulingGroup.podGroupName


class PodSetAssignment(Frozen, frozen=True, kw_only=True):
    name: str
    flavors: Mapping[str, str]  # resource -> flavor
    count: int
    resource_usage: Resources  # total for the podset, MilliUnits


class Admission(Frozen, frozen=True, kw_only=True):
    cluster_queue: str
    pod_set_assignments: tuple[PodSetAssignment, ...]


class ReclaimablePod(Frozen, frozen=True, kw_only=True):
    """An entry of a Workload's status.reclaimablePods: `count` pods of podset `name` finished
    for good and no longer need their quota (Kueue's ReclaimablePods)."""

    name: str
    count: int


class Condition(Frozen, frozen=True, kw_only=True):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""


class AdmissionCheckState(Frozen, frozen=True, kw_only=True):
    name: str
    state: Literal["Pending", "Ready", "Retry", "Rejected"] = "Pending"
    message: str = ""
    retry_count: int = 0  # Kueue's retryCount: Retries counted at evictions (core.check_retries)


class Alternative(Frozen, frozen=True, kw_only=True):
    """Another way to run a workload (annotation `muster.dev/alternatives`, docs/routing.md):
    through LocalQueue `queue_name` of its namespace, with other per-pod requests and run time."""

    queue_name: str
    requests: Resources | None = None  # per pod, over the template's; None: as declared
    run_seconds: float | None = None  # None: the workload's own (muster.dev/run-seconds)


PriorityClassSource = Literal[
    "kueue.x-k8s.io/workloadpriorityclass", "scheduling.k8s.io/priorityclass"
]


class Workload(Frozen, frozen=True, kw_only=True):
    """A Kueue Workload (or the Workload muster derives from a Job)."""

    meta: ObjectMeta
    queue_name: str = ""  # LocalQueue name in meta.namespace; "" means the "default" LocalQueue
    pod_sets: tuple[PodSet, ...] = ()
    priority: int | None = None  # spec.priority when written; else resolved from the class
    priority_class_name: str | None = None
    priority_class_source: PriorityClassSource | None = None
    active: bool = True
    # status as given (a workload may arrive already admitted)
    admission: Admission | None = None
    conditions: tuple[Condition, ...] = ()
    admission_checks: tuple[AdmissionCheckState, ...] = ()
    reclaimable_pods: tuple[ReclaimablePod, ...] = ()  # status.reclaimablePods
    # Decoded from annotation muster.dev/alternatives, in order of preference after queue_name.
    alternatives: tuple[Alternative, ...] = ()
    # A Job's spec.scheduling (Kubernetes v1.37): its pods are one group with this policy.
    scheduling: GroupPolicy | None = None

    @property
    def key(self) -> WorkloadKey:
        return WorkloadKey(f"{self.meta.namespace}/{self.meta.name}")


# --- cluster objects and gang sources (issue 4) -------------------------------------------


class Node(Frozen, frozen=True, kw_only=True):
    """A v1 Node as placement reads it; `allocatable` in milli-units (from status.capacity when
    status.allocatable is absent), without a default for `pods`."""

    meta: ObjectMeta
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True  # condition Ready is "True", or no Ready condition written
    allocatable: Resources = msgspec.field(default_factory=dict)


class WorkloadRef(Frozen, frozen=True, kw_only=True):
    """A pod's `spec.workloadRef`: the scheduling.k8s.io Workload and pod group it joins."""

    name: str
    pod_group: str
    pod_group_replica_key: str = ""


class Pod(Frozen, frozen=True, kw_only=True):
    """A v1 Pod as placement reads it; `requests` per pod in milli-units (containers, init
    containers and overhead combined as Kubernetes does)."""

    meta: ObjectMeta
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    phase: Literal["Pending", "Running", "Succeeded", "Failed"] = "Pending"
    requests: Resources = msgspec.field(default_factory=dict)
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)
    node_affinity_terms: tuple[LabelSelector, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    priority: int | None = None  # spec.priority when written
    priority_class_name: str | None = None
    workload_ref: WorkloadRef | None = None
    scheduling_group: str = ""  # spec.schedulingGroup.podGroupName (Kubernetes v1.36+)

    @property
    def key(self) -> str:
        return f"{self.meta.namespace}/{self.meta.name}"


class PodGroupPolicy(Frozen, frozen=True, kw_only=True):
    """A pod group's policy: a gang of at least `min_count` pods, or basic (`min_count` None)."""

    min_count: int | None = None

    @property
    def gang(self) -> bool:
        return self.min_count is not None


class WorkloadPodGroup(Frozen, frozen=True, kw_only=True):
    name: str
    policy: PodGroupPolicy = msgspec.field(default_factory=PodGroupPolicy)


class SchedulingWorkload(Frozen, frozen=True, kw_only=True):
    """A `scheduling.k8s.io` Workload (not Kueue's). In v1alpha1 (Kubernetes v1.35) it holds the
    pod groups its pods join through `spec.workloadRef` (`pod_groups`); from v1alpha2 (v1.36) on
    it holds the templates PodGroups are made from (`templates`) and places nothing itself."""

    meta: ObjectMeta
    pod_groups: tuple[WorkloadPodGroup, ...] = ()
    controller_ref: OwnerReference | None = None
    api_version: str = "scheduling.k8s.io/v1alpha1"
    templates: tuple[GroupTemplate, ...] = ()


# --- today's gang API: scheduling.k8s.io v1alpha2 (v1.36), v1beta1 and v1alpha3 (v1.37) ------

Disruption = Literal["single", "all"]  # v1.36's "Pod" and "PodGroup"
PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]


class GroupPolicy(Frozen, frozen=True, kw_only=True):
    """How a PodGroup, a CompositePodGroup, their templates or a Job's `spec.scheduling` want
    their members scheduled, whatever the version wrote.

    `min_count`: a gang's `minCount` (pods) or, for a composite, `minGroupCount` (child
    groups); None for the basic policy. `topology_key`: the node label all members share ("" for
    none). `priority`: as written (None: from `priority_class_name`, resolved by the reader).
    """

    min_count: int | None = None
    topology_key: str = ""
    disruption: Disruption = "single"
    priority_class_name: str = ""
    priority: int | None = None
    preemption_policy: PreemptionPolicy = "PreemptLowerPriority"

    @property
    def gang(self) -> bool:
        return self.min_count is not None


class GroupTemplate(Frozen, frozen=True, kw_only=True):
    """A Workload's PodGroupTemplate, or (`composite`) CompositePodGroupTemplate with its
    `children` templates."""

    name: str
    policy: GroupPolicy = msgspec.field(default_factory=GroupPolicy)
    composite: bool = False
    children: tuple[GroupTemplate, ...] = ()


class GroupObject(Frozen, frozen=True, kw_only=True):
    """What a scheduling.k8s.io PodGroup and CompositePodGroup share: the template they were
    made from (`workload_name`, `template_name`), their parent CompositePodGroup (`parent`, ""
    for a root), their policy and the conditions written on them."""

    meta: ObjectMeta
    api_version: str
    workload_name: str = ""
    template_name: str = ""
    parent: str = ""
    policy: GroupPolicy = msgspec.field(default_factory=GroupPolicy)
    conditions: tuple[Condition, ...] = ()
    timeout_s: float | None = None  # annotation muster.dev/gang-timeout-seconds; None: no deadline

    @property
    def key(self) -> str:
        return f"{self.meta.namespace}/{self.meta.name}"


class SchedulingPodGroup(GroupObject, frozen=True, kw_only=True):
    """A `scheduling.k8s.io` PodGroup (v1alpha2, v1beta1, v1alpha3): a gang of the pods whose
    `spec.schedulingGroup.podGroupName` names it. Not scheduler-plugins' `PodGroup`."""


class CompositePodGroup(GroupObject, frozen=True, kw_only=True):
    """A `scheduling.k8s.io/v1alpha3` CompositePodGroup: a gang of child PodGroups and
    CompositePodGroups (those naming it in `parentCompositePodGroupName`)."""


class PodGroup(Frozen, frozen=True, kw_only=True):
    """A scheduler-plugins PodGroup (`scheduling.x-k8s.io/v1alpha1`); pods join it with label
    `scheduling.x-k8s.io/pod-group`."""

    meta: ObjectMeta
    min_member: int = 1
    schedule_timeout_seconds: float | None = None


ClusterObject = Node | Pod | SchedulingWorkload | PodGroup | SchedulingPodGroup | CompositePodGroup
CLUSTER_TYPES = typing.get_args(ClusterObject)  # for isinstance()


# --- Kueue's Configuration ---------------------------------------------------------------------


class FairSharingStrategy(StrEnum):
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


class FairSharingConfig(Frozen, frozen=True, kw_only=True):
    enable: bool = False
    preemption_strategies: tuple[FairSharingStrategy, ...] = (
        FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        FairSharingStrategy.LESS_THAN_INITIAL_SHARE,
    )


class AdmissionFairSharingConfig(Frozen, frozen=True, kw_only=True):
    """Kueue's `admissionFairSharing`: how a LocalQueue's usage decays and what it weighs."""

    usage_half_life_s: float = 0.0  # 0: usage is forgotten at once (Kueue: reset to 0)
    usage_sampling_interval_s: float = 300.0  # prices the entry penalty
    # (resource name, weight) sorted by name; a resource not listed weighs 1
    resource_weights: tuple[tuple[str, float], ...] = ()


class RequeuingStrategy(Frozen, frozen=True, kw_only=True):
    timestamp: Literal["Eviction", "Creation"] = "Eviction"
    backoff_base_seconds: int = 60
    backoff_limit_count: int | None = None  # None: requeue forever
    backoff_max_seconds: int = 3600


class WaitForPodsReadyConfig(Frozen, frozen=True, kw_only=True):
    enable: bool = False
    timeout_seconds: float = 300.0
    # How long an admitted workload whose pods lost readiness after the start may wait for it
    # to come back before it is evicted (PodsReadyTimeout); None: it waits forever.
    recovery_timeout_seconds: float | None = None
    block_admission: bool = False
    requeuing_strategy: RequeuingStrategy = msgspec.field(default_factory=RequeuingStrategy)


class KueueConfig(Frozen, frozen=True, kw_only=True):
    """What Kueue's `Configuration` sets that muster's decisions read, with Kueue's defaults."""

    fair_sharing: FairSharingConfig = msgspec.field(default_factory=FairSharingConfig)
    wait_for_pods_ready: WaitForPodsReadyConfig = msgspec.field(
        default_factory=WaitForPodsReadyConfig
    )
    # Kueue's feature gate PartialAdmission is on by default.
    partial_admission: bool = True
    # Kueue's gate UnadmittedWorkloadsObservability (on by default since Kueue v0.19):
    # granular QuotaReserved=False reasons (WaitingForQuota, NoMatchingFlavor, ExceedsMaxQuota,
    # Misconfigured, Suspended, ...) instead of "Pending" / "Inadmissible".
    granular_pending_reasons: bool = True
    # Kueue's `admissionFairSharing` with its gate AdmissionFairSharing (on by default since
    # Kueue v0.15); None: not configured, no ClusterQueue orders by LocalQueue usage.
    admission_fair_sharing: AdmissionFairSharingConfig | None = None
    # Kueue's gate ReclaimablePods (on by default): a workload's status.reclaimablePods lowers
    # the pods its podsets are asked and hold quota for.
    reclaimable_pods: bool = True


# The objects that describe a cluster's queues (what `config.applied` carries).
ConfigObject = (
    ResourceFlavor
    | ClusterQueue
    | Cohort
    | LocalQueue
    | WorkloadPriorityClass
    | PriorityClass
    | AdmissionCheck
    | Namespace
    | LimitRange
    | RuntimeClass
    | MultiKueueConfig
    | MultiKueueCluster
)
CONFIG_TYPES = typing.get_args(ConfigObject)  # for isinstance()

ApiObject = ConfigObject | Workload | KueueConfig | ClusterObject
