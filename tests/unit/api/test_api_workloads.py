"""Kueue Workloads: pod requests as Kubernetes computes them, priority classes, status."""

from __future__ import annotations

import textwrap

import pytest

from muster.api import decode_yaml
from muster.api.model import (
    Admission,
    AdmissionCheckState,
    Condition,
    LabelSelector,
    LabelSelectorRequirement,
    PodSetAssignment,
    Toleration,
    Workload,
)

GI = 2**30 * 1000


def workload(spec: str, *, version: str = "v1beta2", status: str = "") -> str:
    return textwrap.dedent("""
        apiVersion: kueue.x-k8s.io/{version}
        kind: Workload
        metadata: {{name: train, namespace: ml, creationTimestamp: 2024-05-01T10:00:00Z}}
        spec:
        {spec}
        {status}
    """).format(
        version=version,
        spec=textwrap.indent(textwrap.dedent(spec).strip(), "  "),
        status=textwrap.dedent(status).strip(),
    )


def decoded(text: str) -> Workload:
    objects, errors = decode_yaml(text)
    assert [str(e) for e in errors] == []
    (wl,) = objects
    assert isinstance(wl, Workload)
    return wl


def pod_spec(body: str) -> str:
    return "podSets:\n- name: main\n  count: 2\n  template:\n    spec:\n" + textwrap.indent(
        textwrap.dedent(body).strip(), "      "
    )


def test_sums_containers_and_falls_back_to_limits() -> None:
    wl = decoded(
        workload(
            pod_spec("""
            containers:
            - name: a
              resources: {requests: {cpu: 500m}, limits: {cpu: "1", memory: 1Gi}}
            - name: b
              resources: {limits: {cpu: "2", nvidia.com/gpu: 1}}
            """)
        )
    )
    (ps,) = wl.pod_sets
    assert ps.count == 2
    assert ps.requests == {"cpu": 2500, "memory": GI, "nvidia.com/gpu": 1000}


def test_takes_init_container_peak_when_larger_and_adds_overhead() -> None:
    wl = decoded(
        workload(
            pod_spec("""
            initContainers:
            - name: fetch
              resources: {requests: {cpu: "4", memory: 100Mi}}
            containers:
            - name: main
              resources: {requests: {cpu: "1", memory: 1Gi}}
            overhead: {cpu: 100m}
            """)
        )
    )
    assert wl.pod_sets[0].requests == {"cpu": 4100, "memory": GI}


def test_counts_sidecars_alongside_containers_and_later_init_containers() -> None:
    wl = decoded(
        workload(
            pod_spec("""
            initContainers:
            - name: proxy
              restartPolicy: Always
              resources: {requests: {cpu: "1"}}
            - name: migrate
              resources: {requests: {cpu: "3"}}
            containers:
            - name: main
              resources: {requests: {cpu: "1"}}
            """)
        )
    )
    # init phase peak: proxy 1 + migrate 3 = 4; running: main 1 + proxy 1 = 2
    assert wl.pod_sets[0].requests == {"cpu": 4000}


def test_decodes_node_selector_tolerations_affinity_and_template_annotations() -> None:
    wl = decoded(
        workload("""
        podSets:
        - name: workers
          count: 4
          minCount: 2
          template:
            metadata: {annotations: {muster.dev/run-seconds: "60"}}
            spec:
              nodeSelector: {pool: gpu}
              tolerations: [{key: gpu, operator: Exists}]
              affinity:
                nodeAffinity:
                  requiredDuringSchedulingIgnoredDuringExecution:
                    nodeSelectorTerms:
                    - matchExpressions: [{key: zone, operator: In, values: [a, b]}]
                    - matchExpressions: [{key: spot, operator: DoesNotExist}]
              containers: [{name: w}]
        """)
    )
    (ps,) = wl.pod_sets
    assert (ps.name, ps.count, ps.min_count) == ("workers", 4, 2)
    assert ps.node_selector == {"pool": "gpu"}
    assert ps.tolerations == (Toleration(key="gpu", operator="Exists"),)
    assert ps.node_affinity_terms == (
        LabelSelector(
            match_expressions=(
                LabelSelectorRequirement(key="zone", operator="In", values=("a", "b")),
            )
        ),
        LabelSelector(
            match_expressions=(LabelSelectorRequirement(key="spot", operator="DoesNotExist"),)
        ),
    )
    assert ps.annotations == {"muster.dev/run-seconds": "60"}
    assert ps.requests == {}


def test_rejects_gt_operator_in_node_affinity_with_path() -> None:
    text = workload(
        pod_spec("""
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions: [{key: cores, operator: Gt, values: ["8"]}]
        """)
    )
    objects, errors = decode_yaml(text)
    assert objects == []
    assert [str(e) for e in errors] == [
        "Workload/ml/train: spec.podSets[0].template.spec.affinity.nodeAffinity"
        ".requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"
        ".operator: Gt is not supported; use In, NotIn, Exists or DoesNotExist"
    ]


def test_reports_bad_and_negative_requests_naming_the_resource() -> None:
    text = workload(
        pod_spec("""
        containers:
        - name: a
          resources: {requests: {cpu: lots, nvidia.com/gpu: "-1"}}
        """)
    )
    objects, errors = decode_yaml(text)
    assert objects == []
    base = "Workload/ml/train: spec.podSets[0].template.spec.containers[0].resources.requests"
    assert [str(e) for e in errors] == [
        f'{base}.cpu: expected a quantity such as 500m, 2, 1.5, 10Gi or 1e3, got "lots"',
        f'{base}["nvidia.com/gpu"]: must be >= 0, got -1',
    ]


def test_keeps_metadata_and_defaults() -> None:
    wl = decoded(workload("podSets: [{name: main, count: 1}]\nqueueName: main"))
    assert wl.key == "ml/train"
    assert wl.queue_name == "main"
    assert wl.active is True
    assert wl.priority is None
    assert wl.meta.creation_timestamp == "2024-05-01T10:00:00Z"
    assert wl.meta.uid != ""


def test_v1beta1_priority_class_name_and_v1beta2_ref_give_the_same_model() -> None:
    old = decoded(
        workload(
            """
            podSets: [{name: main, count: 1}]
            priority: 100
            priorityClassName: high
            priorityClassSource: kueue.x-k8s.io/workloadpriorityclass
            """,
            version="v1beta1",
        )
    )
    new = decoded(
        workload("""
        podSets: [{name: main, count: 1}]
        priority: 100
        priorityClassRef: {group: kueue.x-k8s.io, kind: WorkloadPriorityClass, name: high}
        """)
    )
    assert old == new
    assert (new.priority, new.priority_class_name, new.priority_class_source) == (
        100,
        "high",
        "kueue.x-k8s.io/workloadpriorityclass",
    )


@pytest.mark.parametrize(
    ("spec", "source"),
    [
        ("priorityClassName: pods-high", "scheduling.k8s.io/priorityclass"),
        (
            "priorityClassRef: {group: scheduling.k8s.io, kind: PriorityClass, name: pods-high}",
            "scheduling.k8s.io/priorityclass",
        ),
    ],
)
def test_maps_pod_priority_class(spec: str, source: str) -> None:
    wl = decoded(workload(f"podSets: [{{name: main, count: 1}}]\n{spec}"))
    assert (wl.priority_class_name, wl.priority_class_source) == ("pods-high", source)


def test_rejects_priority_class_ref_kind_that_does_not_match_group() -> None:
    text = workload("""
    podSets: [{name: main, count: 1}]
    priorityClassRef: {group: kueue.x-k8s.io, kind: PriorityClass, name: high}
    """)
    objects, errors = decode_yaml(text)
    assert objects == []
    assert [str(e) for e in errors] == [
        'Workload/ml/train: spec.priorityClassRef.kind: must be "WorkloadPriorityClass" for group'
        ' kueue.x-k8s.io, got "PriorityClass"'
    ]


def test_decodes_admitted_status() -> None:
    wl = decoded(
        workload(
            """
            podSets: [{name: main, count: 3}]
            active: false
            """,
            status="""
            status:
              admission:
                clusterQueue: team-a
                podSetAssignments:
                - name: main
                  flavors: {cpu: default}
                  resourceUsage: {cpu: "3", memory: 3Gi}
              conditions:
              - {type: QuotaReserved, status: "True", reason: QuotaReserved, lastTransitionTime: x}
              admissionChecks:
              - {name: prov, state: Ready, message: provisioned}
            """,
        )
    )
    assert wl.active is False
    assert wl.admission == Admission(
        cluster_queue="team-a",
        pod_set_assignments=(
            PodSetAssignment(
                name="main",
                flavors={"cpu": "default"},
                count=3,  # absent in status: the podset's count
                resource_usage={"cpu": 3000, "memory": 3 * GI},
            ),
        ),
    )
    assert wl.conditions == (
        Condition(type="QuotaReserved", status="True", reason="QuotaReserved"),
    )
    assert wl.admission_checks == (
        AdmissionCheckState(name="prov", state="Ready", message="provisioned"),
    )
