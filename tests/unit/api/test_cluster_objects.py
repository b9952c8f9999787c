"""Cluster objects and gang sources from YAML: v1 Node and Pod, the Workload API's Workload,
scheduler-plugins' PodGroup, and Kueue's podset topology annotations."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest

from muster.api import decode_yaml, validate
from muster.api.model import (
    ApiObject,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodGroup,
    PodGroupPolicy,
    SchedulingWorkload,
    Taint,
    Toleration,
    Workload,
    WorkloadPodGroup,
    WorkloadRef,
)

GI = 2**30 * 1000
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"


def decoded(text: str) -> ApiObject:
    objects, errors = decode_yaml(textwrap.dedent(text))
    assert [str(e) for e in errors] == []
    (obj,) = objects
    return obj


def problems(text: str) -> list[str]:
    objects, errors = decode_yaml(textwrap.dedent(text))
    assert objects == []
    return [str(e) for e in errors]


# --- Node ------------------------------------------------------------------------------------


def node(status: str = "", spec: str = "") -> str:
    return (
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {rack: r1}}\n"
        + (f"spec: {spec}\n" if spec else "")
        + (f"status: {status}\n" if status else "")
    )


def test_node_reads_labels_taints_unschedulable_and_allocatable_in_milli_units() -> None:
    found = decoded(
        node(
            spec="{unschedulable: true, taints: [{key: gpu, value: a100, effect: NoSchedule}]}",
            status="{allocatable: {cpu: 3900m, memory: 31Gi, pods: 110},"
            " capacity: {cpu: 4, memory: 32Gi, pods: 110}}",
        )
    )
    assert isinstance(found, Node)
    assert (found.meta.name, found.meta.namespace, found.meta.labels) == ("n1", "", {"rack": "r1"})
    assert found == Node(
        meta=found.meta,
        taints=(Taint(key="gpu", value="a100", effect="NoSchedule"),),
        unschedulable=True,
        ready=True,
        allocatable={"cpu": 3900, "memory": 31 * GI, "pods": 110_000},
    )


def test_node_without_allocatable_uses_capacity_and_lists_no_pod_count_of_its_own() -> None:
    found = decoded(node(status="{capacity: {cpu: 4, memory: 32Gi}}"))
    assert isinstance(found, Node)
    assert found.allocatable == {"cpu": 4000, "memory": 32 * GI}


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ("[]", True),
        ("[{type: MemoryPressure, status: 'False'}]", True),
        ("[{type: Ready, status: 'True'}]", True),
        ("[{type: Ready, status: 'False'}]", False),
        ("[{type: Ready, status: Unknown}]", False),
        ("[{type: Ready}]", False),
    ],
    ids=["none", "no-ready-condition", "true", "false", "unknown", "status-missing"],
)
def test_node_is_ready_unless_its_ready_condition_says_otherwise(
    conditions: str, ready: bool
) -> None:
    found = decoded(node(status=f"{{conditions: {conditions}}}"))
    assert isinstance(found, Node)
    assert found.ready is ready


def test_node_quantity_errors_name_the_map_and_resource() -> None:
    assert problems(
        node(status="{allocatable: {cpu: '-1', memory: 10GB}, capacity: {nvidia.com/gpu: x}}")
    ) == [
        'Node/n1: status.capacity["nvidia.com/gpu"]: expected a quantity such as 500m, 2, 1.5,'
        ' 10Gi or 1e3, got "x"',
        "Node/n1: status.allocatable.cpu: must be >= 0, got -1",
        "Node/n1: status.allocatable.memory: expected a quantity such as 500m, 2, 1.5, 10Gi or"
        ' 1e3, got "10GB"',
    ]


def test_node_taint_with_unknown_effect_is_a_structural_error() -> None:
    assert problems(node(spec="{taints: [{key: a, effect: Sometimes}]}")) == [
        "Node/n1: spec.taints[0].effect: unknown value 'Sometimes'"
    ]


# --- Pod -------------------------------------------------------------------------------------

FULL_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: worker-0
  namespace: ml
  labels: {app: train}
  annotations: {muster.dev/run-seconds: "60"}
  creationTimestamp: 2025-01-02T03:04:05Z
spec:
  schedulerName: muster
  nodeName: n1
  priority: 100
  priorityClassName: high
  workloadRef: {name: train, podGroup: workers, podGroupReplicaKey: "1"}
  nodeSelector: {pool: gpu}
  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: rack, operator: In, values: [r1, r2]}]
  initContainers:
  - {name: fetch, resources: {requests: {cpu: "3"}}}
  containers:
  - {name: a, resources: {requests: {cpu: 500m, memory: 1Gi}}}
  - {name: b, resources: {limits: {cpu: "1", nvidia.com/gpu: 1}}}
  overhead: {cpu: 100m}
status: {phase: Running}
"""


def test_pod_reads_scheduling_fields_and_sums_requests_as_kubernetes_does() -> None:
    pod = decoded(FULL_POD)
    assert isinstance(pod, Pod)
    assert pod.key == "ml/worker-0"
    assert pod.meta.labels == {"app": "train"}
    assert pod.meta.annotations == {"muster.dev/run-seconds": "60"}
    assert pod.meta.creation_timestamp == "2025-01-02T03:04:05Z"
    assert (pod.scheduler_name, pod.node_name, pod.phase) == ("muster", "n1", "Running")
    # init peak 3 cpu beats 1.5 cpu of regular containers; then overhead
    assert pod.requests == {"cpu": 3100, "memory": GI, "nvidia.com/gpu": 1000}
    assert pod.node_selector == {"pool": "gpu"}
    assert pod.tolerations == (Toleration(key="gpu", operator="Exists", effect="NoSchedule"),)
    assert pod.node_affinity_terms == (
        LabelSelector(
            match_expressions=(
                LabelSelectorRequirement(key="rack", operator="In", values=("r1", "r2")),
            )
        ),
    )
    assert (pod.priority, pod.priority_class_name) == (100, "high")
    assert pod.workload_ref == WorkloadRef(
        name="train", pod_group="workers", pod_group_replica_key="1"
    )


def test_pod_defaults_namespace_scheduler_and_phase() -> None:
    pod = decoded("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {schedulerName: ''}\n")
    assert isinstance(pod, Pod)
    assert pod.key == "default/p"
    assert (pod.scheduler_name, pod.node_name, pod.phase) == ("default-scheduler", "", "Pending")
    assert (pod.requests, pod.priority, pod.workload_ref) == ({}, None, None)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("{podGroup: workers}", ["Pod/ml/p: spec.workloadRef.name: is required"]),
        ("{name: train, podGroup: ''}", ["Pod/ml/p: spec.workloadRef.podGroup: is required"]),
        (
            "{}",
            [
                "Pod/ml/p: spec.workloadRef.name: is required",
                "Pod/ml/p: spec.workloadRef.podGroup: is required",
            ],
        ),
    ],
    ids=["no-name", "empty-pod-group", "empty"],
)
def test_pod_workload_ref_must_name_workload_and_pod_group(ref: str, expected: list[str]) -> None:
    text = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\n"
        f"spec: {{workloadRef: {ref}}}\n"
    )
    assert problems(text) == expected


def test_pod_conversion_errors_name_their_fields() -> None:
    assert problems("""
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: ml, creationTimestamp: yesterday}
        spec:
          containers: [{name: c, resources: {requests: {cpu: -2}}}]
          affinity:
            nodeAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                nodeSelectorTerms: [{matchExpressions: [{key: cores, operator: Gt, values: ["4"]}]}]
    """) == [
        "Pod/ml/p: metadata.creationTimestamp: must be an RFC 3339 time such as"
        " 2024-01-02T03:04:05Z, got 'yesterday'",
        "Pod/ml/p: spec.containers[0].resources.requests.cpu: must be >= 0, got -2",
        "Pod/ml/p: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator: Gt is not supported;"
        " use In, NotIn, Exists or DoesNotExist",
    ]


def test_pod_with_an_unknown_phase_is_a_structural_error() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {phase: Lost}\n"
    assert problems(text) == ["Pod/default/p: status.phase: unknown value 'Lost'"]


# --- scheduling.k8s.io/v1alpha1 Workload -----------------------------------------------------


def scheduling_workload(spec: str) -> str:
    return (
        "apiVersion: scheduling.k8s.io/v1alpha1\nkind: Workload\n"
        "metadata: {name: train, namespace: ml, creationTimestamp: 2025-01-02T03:04:05Z}\n"
        "spec:\n" + textwrap.indent(textwrap.dedent(spec).strip(), "  ") + "\n"
    )


def test_workload_api_workload_reads_gang_and_basic_pod_groups_and_controller_ref() -> None:
    wl = decoded(
        scheduling_workload("""
        controllerRef: {apiGroup: batch, kind: Job, name: train}
        podGroups:
        - {name: workers, policy: {gang: {minCount: 4}}}
        - {name: driver, policy: {basic: {}}}
        """)
    )
    assert isinstance(wl, SchedulingWorkload)
    assert (wl.meta.namespace, wl.meta.name) == ("ml", "train")
    assert wl.pod_groups == (
        WorkloadPodGroup(name="workers", policy=PodGroupPolicy(min_count=4)),
        WorkloadPodGroup(name="driver", policy=PodGroupPolicy()),
    )
    assert [group.policy.gang for group in wl.pod_groups] == [True, False]
    assert wl.controller_ref == OwnerReference(
        api_version="batch", kind="Job", name="train", controller=True
    )


def test_workload_api_workload_is_not_taken_for_kueues() -> None:
    kueue = decoded(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: a, namespace: ml}\n"
        "spec: {podSets: [{name: main, count: 1}]}\n"
    )
    assert isinstance(kueue, Workload)
    k8s = decoded(scheduling_workload("podGroups: [{name: a, policy: {basic: {}}}]"))
    assert isinstance(k8s, SchedulingWorkload)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "podGroups: [{name: workers, policy: {gang: {minCount: 2}}},"
            " {name: workers, policy: {basic: {}}}]",
            "spec.podGroups[1].name: duplicate pod group name workers",
        ),
        (
            "podGroups: [{policy: {basic: {}}}]",
            "spec.podGroups[0].name: is required",
        ),
        (
            "podGroups: [{name: w, policy: {gang: {minCount: 0}}}]",
            "spec.podGroups[0].policy.gang.minCount: must be >= 1, got 0",
        ),
        (
            "podGroups: [{name: w, policy: {gang: {}}}]",
            "spec.podGroups[0].policy.gang.minCount: is required",
        ),
        (
            "podGroups: [{name: w, policy: {gang: {minCount: 2}, basic: {}}}]",
            "spec.podGroups[0].policy: must set exactly one of basic or gang",
        ),
        (
            "podGroups: [{name: w}]",
            "spec.podGroups[0].policy: must set exactly one of basic or gang",
        ),
        (
            "podGroups: [{name: w, policy: {gang: {minCount: many}}}]",
            "spec.podGroups[0].policy.gang.minCount: expected an integer or null, got a string",
        ),
        ("podGroups: []", "spec.podGroups: must list 1 to 8 pod groups, got 0"),
        (
            "podGroups: ["
            + ", ".join(f"{{name: g{i}, policy: {{basic: {{}}}}}}" for i in range(9))
            + "]",
            "spec.podGroups: must list 1 to 8 pod groups, got 9",
        ),
        (
            "{controllerRef: {kind: Job}, podGroups: [{name: w, policy: {basic: {}}}]}",
            "spec.controllerRef.name: is required",
        ),
    ],
    ids=[
        "duplicate-name",
        "no-name",
        "min-count-zero",
        "min-count-missing",
        "both-policies",
        "no-policy",
        "min-count-not-a-number",
        "no-pod-groups",
        "nine-pod-groups",
        "controller-ref-without-name",
    ],
)
def test_workload_api_workload_errors_name_the_field(spec: str, expected: str) -> None:
    assert problems(scheduling_workload(spec)) == [f"Workload/ml/train: {expected}"]


# --- scheduler-plugins PodGroup --------------------------------------------------------------


def pod_group(spec: str = "") -> str:
    return (
        "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n"
        "metadata: {name: g, namespace: ml}\n" + (f"spec: {spec}\n" if spec else "")
    )


def test_pod_group_defaults_min_member_to_one_and_leaves_timeout_unset() -> None:
    group = decoded(pod_group())
    assert isinstance(group, PodGroup)
    assert (group.min_member, group.schedule_timeout_seconds) == (1, None)


def test_pod_group_reads_min_member_and_timeout() -> None:
    group = decoded(pod_group("{minMember: 4, scheduleTimeoutSeconds: 30}"))
    assert isinstance(group, PodGroup)
    assert (group.min_member, group.schedule_timeout_seconds) == (4, 30.0)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("{minMember: 0}", "spec.minMember: must be >= 1, got 0"),
        ("{scheduleTimeoutSeconds: 0}", "spec.scheduleTimeoutSeconds: must be > 0, got 0"),
        (
            "{scheduleTimeoutSeconds: 1.5}",
            "spec.scheduleTimeoutSeconds: expected an integer or null,"
            " got a number with a decimal point",
        ),
    ],
    ids=["min-member-zero", "timeout-zero", "timeout-fraction"],
)
def test_pod_group_errors_name_the_field(spec: str, expected: str) -> None:
    assert problems(pod_group(spec)) == [f"PodGroup/ml/g: {expected}"]


# --- Kueue's podset topology annotations -----------------------------------------------------


def kueue_workload(annotations: str) -> str:
    return (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w, namespace: ml}\n"
        "spec:\n  podSets:\n  - name: main\n    count: 2\n"
        f"    template: {{metadata: {{annotations: {annotations}}}}}\n"
    )


def job(annotations: str) -> str:
    return (
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ml}\n"
        f"spec: {{template: {{metadata: {{annotations: {annotations}}}}}}}\n"
    )


@pytest.mark.parametrize("annotation", [REQUIRED, PREFERRED])
def test_one_topology_annotation_is_kept_on_the_podset(annotation: str) -> None:
    wl = decoded(kueue_workload(f"{{{annotation}: cloud.com/rack}}"))
    assert isinstance(wl, Workload)
    assert wl.pod_sets[0].annotations == {annotation: "cloud.com/rack"}


@pytest.mark.parametrize(
    ("make", "who", "path"),
    [
        (kueue_workload, "Workload/ml/w", "spec.podSets[0].template.metadata.annotations"),
        (job, "Job/ml/j", "spec.template.metadata.annotations"),
    ],
    ids=["workload", "job"],
)
def test_topology_annotations_are_exclusive_and_name_a_label(
    make: Callable[[str], str], who: str, path: str
) -> None:
    both = make(f"{{{REQUIRED}: rack, {PREFERRED}: block}}")
    assert problems(both) == [
        f'{who}: {path}["{PREFERRED}"]: must not be set together with {REQUIRED}'
    ]
    empty = make(f"{{{REQUIRED}: ''}}")
    assert problems(empty) == [f'{who}: {path}["{REQUIRED}"]: must name a node label key']


def test_validate_names_a_workload_api_workload_built_in_code_as_written() -> None:
    built = SchedulingWorkload(meta=ObjectMeta(name="w", namespace="ml"))
    assert [str(e) for e in validate(built)] == [
        "Workload/ml/w: spec.podGroups: must list 1 to 8 pod groups, got 0"
    ]
