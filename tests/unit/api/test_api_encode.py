"""Workloads back to Kueue manifests; decoding the output gives the same model."""

from __future__ import annotations

from typing import Any

import pytest

from muster.api import decode_documents, quantities_to_strings, workload_to_kueue
from muster.api.model import (
    Admission,
    Condition,
    LabelSelector,
    LabelSelectorRequirement,
    ObjectMeta,
    OwnerReference,
    PodSet,
    PodSetAssignment,
    Toleration,
    Workload,
)

GI = 2**30 * 1000


def admitted_workload(**overrides: object) -> Workload:
    fields: dict[str, object] = {
        "meta": ObjectMeta(
            name="job-train-abcde",
            namespace="ml",
            uid="wl-uid",
            annotations={"muster.dev/run-seconds": "60"},
            creation_timestamp="2024-01-01T00:00:00Z",
            owner_references=(
                OwnerReference(api_version="batch/v1", kind="Job", name="train", controller=True),
            ),
        ),
        "queue_name": "main",
        "pod_sets": (
            PodSet(
                name="main",
                count=4,
                min_count=2,
                requests={"cpu": 500, "memory": 2 * GI},
                node_selector={"pool": "a"},
                tolerations=(Toleration(key="gpu", operator="Exists"),),
                node_affinity_terms=(
                    LabelSelector(
                        match_expressions=(
                            LabelSelectorRequirement(key="zone", operator="In", values=("x",)),
                        )
                    ),
                ),
            ),
        ),
        "priority": 100,
        "priority_class_name": "high",
        "priority_class_source": "kueue.x-k8s.io/workloadpriorityclass",
        "admission": Admission(
            cluster_queue="team-a",
            pod_set_assignments=(
                PodSetAssignment(
                    name="main",
                    flavors={"cpu": "default", "memory": "default"},
                    count=4,
                    resource_usage={"cpu": 2000, "memory": 8 * GI},
                ),
            ),
        ),
        "conditions": (Condition(type="QuotaReserved", status="True", reason="QuotaReserved"),),
    }
    fields.update(overrides)
    return Workload(**fields)  # type: ignore[arg-type]


def test_encodes_v1beta2_manifest() -> None:
    manifest = workload_to_kueue(admitted_workload())
    assert manifest["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert manifest["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True}
    ]
    spec = manifest["spec"]
    assert spec["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "high",
    }
    pod_set = spec["podSets"][0]
    assert (pod_set["count"], pod_set["minCount"]) == (4, 2)
    container = pod_set["template"]["spec"]["containers"][0]
    assert container == {
        "name": "main",
        "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}},
    }
    assignment = manifest["status"]["admission"]["podSetAssignments"][0]
    assert assignment["resourceUsage"] == {"cpu": "2", "memory": "8Gi"}
    assert manifest["status"]["conditions"] == [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}
    ]


def test_encodes_v1beta1_priority_class_fields() -> None:
    spec = workload_to_kueue(admitted_workload(), api_version="kueue.x-k8s.io/v1beta1")["spec"]
    assert spec["priorityClassName"] == "high"
    assert spec["priorityClassSource"] == "kueue.x-k8s.io/workloadpriorityclass"
    assert "priorityClassRef" not in spec


@pytest.mark.parametrize("version", ["kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"])
def test_round_trips_through_decode(version: str) -> None:
    wl = admitted_workload()
    objects, errors = decode_documents([workload_to_kueue(wl, api_version=version)])
    assert errors == []
    assert objects == [wl]


def test_omits_empty_fields() -> None:
    bare = Workload(
        meta=ObjectMeta(name="w", namespace="ml"), pod_sets=(PodSet(name="main", count=1),)
    )
    assert workload_to_kueue(bare) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ml"},
        "spec": {
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "main"}]}},
                }
            ],
            "active": True,
        },
    }


def test_quantities_use_binary_suffixes_for_bytes_only() -> None:
    assert quantities_to_strings(
        {"nvidia.com/gpu": 1024 * 1000, "memory": 1024 * 1000, "cpu": 1500}
    ) == {
        "cpu": "1500m",
        "memory": "1Ki",
        "nvidia.com/gpu": "1024",
    }


def _workload_of(pod_spec: str) -> Workload:
    """A Workload of one podset, `main`, of 2 pods of `pod_spec` (YAML, indented as a spec)."""
    from muster.api.decode import decode_yaml

    objects, errors = decode_yaml(f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: ml, name: w}}
spec:
  queueName: main
  podSets:
  - name: main
    count: 2
    template:
      spec:
{pod_spec}""")
    assert errors == []
    (wl,) = objects
    assert isinstance(wl, Workload)
    again, errors = decode_documents([workload_to_kueue(wl)])
    assert errors == []
    assert again == [wl]  # it reads back the same
    return wl


def _pod_spec(wl: Workload) -> dict[str, Any]:
    spec: dict[str, Any] = workload_to_kueue(wl)["spec"]["podSets"][0]["template"]["spec"]
    return spec


def test_containers_round_trip_as_written_for_limit_ranges() -> None:
    """A podset with limits, several containers, a sidecar or overhead is written container by
    container (a LimitRange's defaults apply to each), and reads back the same."""
    wl = _workload_of("""\
        overhead: {cpu: 100m}
        initContainers:
        - {name: side, restartPolicy: Always, resources: {limits: {cpu: 1}}}
        - {name: init, resources: {requests: {memory: 1Gi}}}
        containers:
        - {name: a, resources: {requests: {cpu: 500m}, limits: {cpu: 2}}}
        - {name: b}
""")
    (ps,) = wl.pod_sets
    assert ps.requests == {"cpu": 1600, "memory": GI}  # 500m + sidecar 1 + overhead 100m
    spec = _pod_spec(wl)
    assert spec["containers"] == [
        {"name": "c0", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}},
        {"name": "c1"},
    ]
    assert spec["initContainers"][0] == {
        "name": "init0",
        "resources": {"limits": {"cpu": "1"}},
        "restartPolicy": "Always",
    }


def test_runtime_class_and_pod_level_resources_round_trip() -> None:
    """A podset naming a RuntimeClass, with its own spec.resources, is written with both (the
    engine charges the RuntimeClass's overhead and the pod's requests from them) and reads
    back the same."""
    wl = _workload_of("""\
        runtimeClassName: kata
        resources: {requests: {cpu: 2}, limits: {memory: 1Gi}}
        containers: [{name: a, resources: {requests: {cpu: 500m, nvidia.com/gpu: 1}}}]
""")
    (ps,) = wl.pod_sets
    # The pod's cpu and memory (its memory limit as the request); the container's gpu.
    assert ps.requests == {"cpu": 2000, "memory": GI, "nvidia.com/gpu": 1000}
    spec = _pod_spec(wl)
    assert spec["runtimeClassName"] == "kata"
    assert spec["resources"] == {"requests": {"cpu": "2"}, "limits": {"memory": "1Gi"}}
