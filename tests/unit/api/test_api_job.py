"""batch/v1 Jobs become the Workload Kueue would create for them."""

from __future__ import annotations

import pytest

from muster.api import decode_documents, workload_name_for_job
from muster.api.model import OwnerReference, Workload


def job(
    *,
    name: str = "train",
    namespace: str | None = "ml",
    uid: str = "uid-1",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    parallelism: int | None = None,
    completions: int | None = None,
    cpu: str = "1",
    pod_priority_class: str | None = None,
) -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "uid": uid}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, object] = {
        "template": {
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                **({"priorityClassName": pod_priority_class} if pod_priority_class else {}),
            }
        }
    }
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def workload_of(doc: dict[str, object]) -> Workload:
    objects, errors = decode_documents([doc])
    assert [str(e) for e in errors] == []
    (wl,) = objects
    assert isinstance(wl, Workload)
    return wl


def test_names_workload_after_the_job_with_a_stable_hash() -> None:
    wl = workload_of(job())
    assert wl.meta.name == workload_name_for_job("train", "uid-1")
    assert wl.meta.name.startswith("job-train-")
    assert len(wl.meta.name) == len("job-train-") + 5
    assert workload_name_for_job("train", "uid-1") == workload_name_for_job("train", "uid-1")
    assert workload_name_for_job("train", "uid-1") != workload_name_for_job("train", "uid-2")
    assert wl.meta.namespace == "ml"


def test_keeps_workload_name_within_a_label_value_each_pod_carries() -> None:
    for job_name in ("x" * 300, "x" * 63, "x" * 58 + ".y"):
        name = workload_name_for_job(job_name, "uid")
        assert len(name) <= 63
        assert name.startswith("job-xxx")
        assert name[-6] == "-"
        assert name[-7] not in "-."
    assert workload_name_for_job("x" * 63, "a") != workload_name_for_job("x" * 63, "b")


def test_owner_reference_points_at_the_job() -> None:
    wl = workload_of(job())
    assert wl.meta.owner_references == (
        OwnerReference(
            api_version="batch/v1", kind="Job", name="train", uid="uid-1", controller=True
        ),
    )


def test_copies_labels_annotations_and_creation_time() -> None:
    doc = job(annotations={"muster.dev/run-seconds": "30", "muster.dev/submit-after": "10"})
    doc["metadata"]["creationTimestamp"] = "2024-01-02T03:04:05Z"  # type: ignore[index]
    wl = workload_of(doc)
    assert wl.meta.annotations == {"muster.dev/run-seconds": "30", "muster.dev/submit-after": "10"}
    assert wl.meta.creation_timestamp == "2024-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("labels", "annotations", "queue"),
    [
        ({"kueue.x-k8s.io/queue-name": "from-label"}, None, "from-label"),
        (None, {"kueue.x-k8s.io/queue-name": "from-annotation"}, "from-annotation"),
        (
            {"kueue.x-k8s.io/queue-name": "label-wins"},
            {"kueue.x-k8s.io/queue-name": "annotation"},
            "label-wins",
        ),
        (None, None, ""),
    ],
)
def test_takes_queue_from_label_then_annotation(
    labels: dict[str, str] | None, annotations: dict[str, str] | None, queue: str
) -> None:
    assert workload_of(job(labels=labels, annotations=annotations)).queue_name == queue


@pytest.mark.parametrize(
    ("parallelism", "completions", "count"),
    [(None, None, 1), (4, None, 4), (4, 10, 4), (4, 2, 2), (0, None, 0)],
)
def test_pod_count_is_parallelism_capped_by_completions(
    parallelism: int | None, completions: int | None, count: int
) -> None:
    (ps,) = workload_of(job(parallelism=parallelism, completions=completions)).pod_sets
    assert (ps.name, ps.count, ps.requests) == ("main", count, {"cpu": 1000})


def test_min_parallelism_annotation_enables_partial_admission() -> None:
    wl = workload_of(job(parallelism=6, annotations={"kueue.x-k8s.io/job-min-parallelism": "2"}))
    assert wl.pod_sets[0].min_count == 2


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("6", "must be >= 1 and < the pod count 6, got 6"),
        ("0", "must be >= 1 and < the pod count 6, got 0"),
        ("two", 'must be an integer, got "two"'),
    ],
)
def test_rejects_bad_min_parallelism_naming_the_job(value: str, problem: str) -> None:
    doc = job(parallelism=6, annotations={"kueue.x-k8s.io/job-min-parallelism": value})
    objects, errors = decode_documents([doc])
    assert objects == []
    assert [str(e) for e in errors] == [
        f'Job/ml/train: metadata.annotations["kueue.x-k8s.io/job-min-parallelism"]: {problem}'
    ]


def test_workload_priority_class_label_wins_over_pod_priority_class() -> None:
    wl = workload_of(
        job(labels={"kueue.x-k8s.io/priority-class": "high"}, pod_priority_class="pods")
    )
    assert (wl.priority_class_name, wl.priority_class_source) == (
        "high",
        "kueue.x-k8s.io/workloadpriorityclass",
    )
    wl = workload_of(job(pod_priority_class="pods"))
    assert (wl.priority_class_name, wl.priority_class_source) == (
        "pods",
        "scheduling.k8s.io/priorityclass",
    )


def test_job_without_namespace_lands_in_default() -> None:
    assert workload_of(job(namespace=None)).meta.namespace == "default"


def test_job_errors_name_the_job_and_its_field() -> None:
    objects, errors = decode_documents([job(cpu="1.5.5")])
    assert objects == []
    assert [str(e) for e in errors] == [
        "Job/ml/train: spec.template.spec.containers[0].resources.requests.cpu: expected a"
        ' quantity such as 500m, 2, 1.5, 10Gi or 1e3, got "1.5.5"'
    ]
