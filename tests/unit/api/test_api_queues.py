"""ClusterQueue, Cohort, LocalQueue, ResourceFlavor and the small kinds, v1beta1 and v1beta2."""

from __future__ import annotations

import textwrap

import pytest

from muster.api import decode_yaml
from muster.api.model import (
    AdmissionCheck,
    AdmissionCheckStrategyRule,
    AdmissionMode,
    ApiObject,
    ClusterQueue,
    Cohort,
    FungibilityPolicy,
    LabelSelector,
    LocalQueue,
    Namespace,
    PriorityClass,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    StopPolicy,
    Taint,
    Toleration,
    WithinClusterQueue,
    WorkloadPriorityClass,
)

GI = 2**30 * 1000

CQ_V1BETA1 = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a, uid: cq-uid}
spec:
  cohort: shared
  queueingStrategy: StrictFIFO
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: 10, borrowingLimit: "2", lendingLimit: 500m}
      - {name: memory, nominalQuota: 64Gi}
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  flavorFungibility: {whenCanBorrow: Borrow, whenCanPreempt: Preempt}
  admissionChecks: [prov]
  stopPolicy: Hold
  fairSharing: {weight: "0.5"}
"""

CQ_V1BETA2 = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a, uid: cq-uid}
spec:
  cohortName: shared
  queueingStrategy: StrictFIFO
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: "10", borrowingLimit: 2, lendingLimit: 0.5}
      - {name: memory, nominalQuota: 64Gi}
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  flavorFungibility: {whenCanBorrow: MayStopSearch, whenCanPreempt: MayStopSearch}
  admissionChecksStrategy:
    admissionChecks: [{name: prov}]
  stopPolicy: Hold
  fairSharing: {weight: 0.5}
"""


def one(text: str) -> ApiObject:
    objects, errors = decode_yaml(textwrap.dedent(text))
    assert errors == []
    assert len(objects) == 1
    return objects[0]


def problems(text: str) -> list[str]:
    objects, errors = decode_yaml(textwrap.dedent(text))
    assert objects == []
    return [str(e) for e in errors]


def test_v1beta1_and_v1beta2_cluster_queues_decode_to_the_same_model() -> None:
    old, new = one(CQ_V1BETA1), one(CQ_V1BETA2)
    assert old == new
    assert isinstance(new, ClusterQueue)
    assert new.cohort == "shared"
    assert new.queueing_strategy is QueueingStrategy.STRICT_FIFO
    assert new.namespace_selector == LabelSelector()
    quota = new.resource_groups[0].flavors[0].resources
    assert (quota[0].nominal_quota, quota[0].borrowing_limit, quota[0].lending_limit) == (
        10_000,
        2000,
        500,
    )
    assert quota[1].nominal_quota == 64 * GI
    assert new.preemption.within_cluster_queue is WithinClusterQueue.LOWER_PRIORITY
    assert new.preemption.reclaim_within_cohort is ReclaimWithinCohort.ANY
    assert new.preemption.borrow_within_cohort.max_priority_threshold == 100
    assert new.flavor_fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
    assert new.flavor_fungibility.when_can_preempt is FungibilityPolicy.MAY_STOP_SEARCH
    assert new.admission_checks == (AdmissionCheckStrategyRule(name="prov"),)
    assert new.stop_policy is StopPolicy.HOLD
    assert new.fair_sharing_weight == 0.5


def test_cluster_queue_defaults_match_kueue() -> None:
    cq = one("""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ClusterQueue
        metadata: {name: bare}
    """)
    assert isinstance(cq, ClusterQueue)
    assert cq.cohort is None
    assert cq.namespace_selector is None  # absent: matches no namespace
    assert cq.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO
    assert cq.flavor_fungibility.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
    assert cq.flavor_fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    assert cq.fair_sharing_weight == 1.0
    assert cq.meta.uid != ""  # derived, so core has a tie-breaker


@pytest.mark.parametrize(
    ("borrow", "preempt", "expected"),
    [
        ("Borrow", "Preempt", ("MayStopSearch", "MayStopSearch")),
        ("TryNextFlavor", "TryNextFlavor", ("TryNextFlavor", "TryNextFlavor")),
        ("MayStopSearch", "TryNextFlavor", ("MayStopSearch", "TryNextFlavor")),
    ],
)
def test_maps_v1beta1_fungibility(borrow: str, preempt: str, expected: tuple[str, str]) -> None:
    cq = one(f"""
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: ClusterQueue
        metadata: {{name: a}}
        spec:
          flavorFungibility: {{whenCanBorrow: {borrow}, whenCanPreempt: {preempt}}}
    """)
    assert isinstance(cq, ClusterQueue)
    fungibility = cq.flavor_fungibility
    assert (fungibility.when_can_borrow.value, fungibility.when_can_preempt.value) == expected


def test_rejects_v1beta1_fungibility_spelling_in_v1beta2() -> None:
    assert problems("""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ClusterQueue
        metadata: {name: a}
        spec:
          flavorFungibility: {whenCanBorrow: Borrow}
    """) == [
        "ClusterQueue/a: spec.flavorFungibility.whenCanBorrow: Borrow is a kueue.x-k8s.io/v1beta1"
        " value; use MayStopSearch in kueue.x-k8s.io/v1beta2"
    ]


def test_accepts_either_cohort_spelling_but_not_two_different_ones() -> None:
    cq = one("""
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: ClusterQueue
        metadata: {name: a}
        spec: {cohortName: shared}
    """)
    assert isinstance(cq, ClusterQueue)
    assert cq.cohort == "shared"
    assert problems("""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ClusterQueue
        metadata: {name: a}
        spec: {cohort: one, cohortName: two}
    """) == ['ClusterQueue/a: spec.cohortName: "two" differs from spec.cohort "one"; set only one']


def test_merges_admission_check_strategy_with_flavors() -> None:
    cq = one("""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ClusterQueue
        metadata: {name: a}
        spec:
          admissionChecksStrategy:
            admissionChecks:
            - {name: prov, onFlavors: [spot]}
            - {name: audit}
    """)
    assert isinstance(cq, ClusterQueue)
    assert cq.admission_checks == (
        AdmissionCheckStrategyRule(name="prov", on_flavors=("spot",)),
        AdmissionCheckStrategyRule(name="audit"),
    )


def test_rejects_both_admission_check_spellings() -> None:
    assert problems("""
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: ClusterQueue
        metadata: {name: a}
        spec:
          admissionChecks: [x]
          admissionChecksStrategy: {admissionChecks: [{name: y}]}
    """) == [
        "ClusterQueue/a: spec.admissionChecksStrategy: cannot be set together with"
        " spec.admissionChecks"
    ]


@pytest.mark.parametrize(("version", "field"), [("v1beta1", "parent"), ("v1beta2", "parentName")])
def test_decodes_cohort_parent_in_each_version(version: str, field: str) -> None:
    cohort = one(f"""
        apiVersion: kueue.x-k8s.io/{version}
        kind: Cohort
        metadata: {{name: child}}
        spec:
          {field}: root
          fairSharing: {{weight: 2}}
          resourceGroups:
          - coveredResources: [cpu]
            flavors:
            - name: default
              resources: [{{name: cpu, nominalQuota: 4, lendingLimit: 1}}]
    """)
    assert isinstance(cohort, Cohort)
    assert cohort.parent == "root"
    assert cohort.fair_sharing_weight == 2.0
    assert cohort.resource_groups[0].flavors[0].resources[0].lending_limit == 1000


@pytest.mark.parametrize(("version", "field"), [("v1beta1", "parent"), ("v1beta2", "parentName")])
def test_rejects_cohort_that_is_its_own_parent(version: str, field: str) -> None:
    assert problems(f"""
        apiVersion: kueue.x-k8s.io/{version}
        kind: Cohort
        metadata: {{name: loop}}
        spec: {{{field}: loop}}
    """) == [f"Cohort/loop: spec.{field}: a Cohort cannot be its own parent (loop)"]


def test_decodes_resource_flavor() -> None:
    flavor = one("""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ResourceFlavor
        metadata: {name: spot, namespace: ignored}
        spec:
          nodeLabels: {pool: spot}
          nodeTaints: [{key: spot, value: "true", effect: NoSchedule}]
          tolerations: [{key: gpu, operator: Exists, effect: NoExecute, tolerationSeconds: 5}]
          topologyName: dc
    """)
    assert isinstance(flavor, ResourceFlavor)
    assert flavor == ResourceFlavor(
        meta=flavor.meta,
        node_labels={"pool": "spot"},
        node_taints=(Taint(key="spot", value="true", effect="NoSchedule"),),
        tolerations=(Toleration(key="gpu", operator="Exists", effect="NoExecute"),),
        topology_name="dc",
    )
    assert flavor.meta.namespace == ""  # cluster-scoped


def test_local_queue_namespace_defaults_to_default() -> None:
    lq = one("""
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: LocalQueue
        metadata: {name: main}
        spec: {clusterQueue: team-a, stopPolicy: HoldAndDrain}
    """)
    assert isinstance(lq, LocalQueue)
    assert (lq.key, lq.cluster_queue, lq.stop_policy) == (
        "default/main",
        "team-a",
        StopPolicy.HOLD_AND_DRAIN,
    )


def test_local_queue_without_cluster_queue_names_the_field() -> None:
    assert problems("""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: LocalQueue
        metadata: {name: main, namespace: ml}
        spec: {}
    """) == ["LocalQueue/ml/main: spec.clusterQueue: is required"]


def test_decodes_priority_classes_admission_checks_and_namespaces() -> None:
    objects, errors = decode_yaml(
        textwrap.dedent("""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: WorkloadPriorityClass
        metadata: {name: high}
        value: 1000
        description: urgent
        ---
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: pods-high}
        value: 500
        globalDefault: true
        ---
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: AdmissionCheck
        metadata: {name: prov}
        spec: {controllerName: kueue.x-k8s.io/provisioning-request}
        ---
        apiVersion: v1
        kind: Namespace
        metadata: {name: ml, labels: {team: ml}}
    """)
    )
    assert errors == []
    wpc, pc, check, ns = objects
    assert isinstance(wpc, WorkloadPriorityClass)
    assert (wpc.value, wpc.description) == (1000, "urgent")
    assert isinstance(pc, PriorityClass)
    assert (pc.value, pc.global_default) == (500, True)
    assert isinstance(check, AdmissionCheck)
    assert check.controller_name == "kueue.x-k8s.io/provisioning-request"
    assert isinstance(ns, Namespace)
    assert ns.meta.labels == {"team": "ml"}


def shared_queue_yaml(mode: str, weight: str) -> str:
    """A ClusterQueue with `admissionScope` and a LocalQueue of fair-sharing `weight` on it."""
    return f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: shared}}
spec:
  admissionScope: {{admissionMode: {mode}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: team-a, name: lq}}
spec: {{clusterQueue: shared, fairSharing: {{weight: "{weight}"}}}}
"""


def test_reads_admission_scope_and_local_queue_weight() -> None:
    objects, errors = decode_yaml(shared_queue_yaml("UsageBasedAdmissionFairSharing", "0.5"))
    assert [str(e) for e in errors] == []
    cq, lq = objects
    assert isinstance(cq, ClusterQueue)
    assert isinstance(lq, LocalQueue)
    assert cq.admission_mode is AdmissionMode.USAGE_BASED
    assert lq.fair_sharing_weight == 0.5


def test_rejects_an_unknown_admission_mode_and_a_negative_local_queue_weight() -> None:
    _, errors = decode_yaml(shared_queue_yaml("Sometimes", "-1"))
    problems = [str(e) for e in errors]
    assert len(problems) == 2, problems
    assert problems[0] == (
        "ClusterQueue/shared: spec.admissionScope.admissionMode: unknown value 'Sometimes'"
    )
    assert problems[1] == "LocalQueue/team-a/lq: spec.fairSharing.weight: must be >= 0, got -1"
