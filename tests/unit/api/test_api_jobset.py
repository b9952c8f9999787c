"""jobset.x-k8s.io/v1alpha2 JobSets become the Workload Kueue would create for them."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from muster.api import decode_documents, decode_yaml
from muster.api.jobset import pods_ready, workload_name_for_jobset
from muster.api.model import OwnerReference, ReclaimablePod, Workload
from muster.api.raw import RawJobSet


def replicated(
    name: str,
    *,
    replicas: int | None = None,
    parallelism: int | None = None,
    completions: int | None = None,
    cpu: str = "1",
    priority_class: str = "",
) -> dict[str, Any]:
    job: dict[str, Any] = {
        "template": {
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                **({"priorityClassName": priority_class} if priority_class else {}),
            }
        }
    }
    if parallelism is not None:
        job["parallelism"] = parallelism
    if completions is not None:
        job["completions"] = completions
    out: dict[str, Any] = {"name": name, "template": {"spec": job}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def jobset(
    *jobs: dict[str, Any],
    name: str = "train",
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": "uid-1"}
    if labels:
        meta["labels"] = labels
    doc: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": {"suspend": True, "replicatedJobs": list(jobs)},
    }
    if status is not None:
        doc["status"] = status
    return doc


def workload_of(doc: dict[str, Any]) -> Workload:
    objects, errors = decode_documents([doc], validation="strict")
    assert [str(e) for e in errors] == []
    (wl,) = objects
    assert isinstance(wl, Workload)
    return wl


def problems_of(doc: dict[str, Any]) -> list[str]:
    return [str(e) for e in decode_documents([doc], validation="strict")[1]]


def test_one_podset_per_replicated_job_of_replicas_times_pods_per_job() -> None:
    wl = workload_of(
        jobset(
            replicated("driver"),
            replicated("workers", replicas=3, parallelism=4, completions=2, cpu="500m"),
        )
    )

    assert [(ps.name, ps.count, ps.min_count) for ps in wl.pod_sets] == [
        ("driver", 1, None),
        ("workers", 6, None),
    ]
    assert wl.pod_sets[1].requests == {"cpu": 500}


def test_names_workload_after_the_jobset_and_owns_it() -> None:
    wl = workload_of(jobset(replicated("w")))

    assert wl.meta.name == workload_name_for_jobset("train", "uid-1")
    assert wl.meta.name.startswith("jobset-train-")
    assert workload_name_for_jobset("train", "uid-1") != workload_name_for_jobset("train", "uid-2")
    assert wl.meta.owner_references == (
        OwnerReference(
            api_version="jobset.x-k8s.io/v1alpha2",
            kind="JobSet",
            name="train",
            uid="uid-1",
            controller=True,
        ),
    )


def test_queue_and_priority_class_labels_then_the_first_pod_priority_class() -> None:
    labelled = workload_of(
        jobset(
            replicated("w", priority_class="pod-high"),
            labels={"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/priority-class": "high"},
        )
    )
    by_pods = workload_of(jobset(replicated("a"), replicated("b", priority_class="pod-high")))

    assert (labelled.queue_name, labelled.priority_class_name) == ("lq", "high")
    assert labelled.priority_class_source == "kueue.x-k8s.io/workloadpriorityclass"
    assert (by_pods.queue_name, by_pods.priority_class_name) == ("", "pod-high")
    assert by_pods.priority_class_source == "scheduling.k8s.io/priorityclass"


def test_succeeded_child_jobs_are_reclaimable_unless_the_status_claims_too_many() -> None:
    status = {
        "replicatedJobsStatus": [
            {"name": "workers", "succeeded": 2},
            {"name": "driver", "succeeded": 5},  # more than its 1 replica: not believed
        ]
    }
    wl = workload_of(
        jobset(
            replicated("driver"), replicated("workers", replicas=3, parallelism=2), status=status
        )
    )

    assert wl.reclaimable_pods == (ReclaimablePod(name="workers", count=4),)


@pytest.mark.parametrize(
    ("jobs", "problem"),
    [
        ((), "spec.replicatedJobs: must list at least 1 replicatedJob"),
        (
            tuple(replicated(f"j{i}") for i in range(19)),
            "spec.replicatedJobs: must list at most 18 replicatedJobs (a Workload's podsets),"
            " got 19",
        ),
        (
            (replicated("w"), replicated("w")),
            'replicatedJobs[1].name: duplicate replicatedJob name "w"',
        ),
        ((replicated("Bad_Name"),), "spec.replicatedJobs[0].name: must be a DNS-1123 label"),
        ((replicated(""),), "spec.replicatedJobs[0].name: is required"),
        ((replicated("w", replicas=-1),), "spec.replicatedJobs[0].replicas: must be >= 0, got -1"),
        (
            (replicated("w", parallelism=-2),),
            "spec.replicatedJobs[0].template.spec.parallelism: must be >= 0, got -2",
        ),
        (
            (replicated("w", replicas=2**31 - 1, parallelism=2**31 - 1),),
            "spec.replicatedJobs: must ask for at most 100000 pods in all (replicas x parallelism"
            f" summed), got {(2**31 - 1) ** 2}",
        ),
        ((replicated("w", cpu="lots"),), "spec.replicatedJobs[0].template.spec.template.spec"),
    ],
)
def test_a_hostile_jobset_is_refused_naming_it_and_the_field(
    jobs: tuple[dict[str, Any], ...], problem: str
) -> None:
    problems = problems_of(jobset(*jobs))

    assert any(p.startswith("JobSet/ml/train: ") and problem in p for p in problems), problems


def test_a_jobset_managed_by_multikueue_makes_the_same_workload_as_one_run_here() -> None:
    doc = jobset(replicated("w", replicas=2))
    here = workload_of(doc)
    doc["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"

    assert problems_of(doc) == []
    assert workload_of(doc) == here


@pytest.mark.parametrize(
    ("rows", "ready"),
    [
        pytest.param([], False, id="no-counts-yet"),
        pytest.param([("driver", 1, 0), ("workers", 1, 0)], False, id="one-workers-job-short"),
        pytest.param([("driver", 1, 0), ("workers", 2, 0)], True, id="every-job-ready"),
        pytest.param([("driver", 1, 0), ("workers", 1, 1)], True, id="succeeded-counts-too"),
        # Summed over the JobSet, as Kueue sums them: a surplus in one covers another.
        pytest.param([("driver", 0, 0), ("workers", 2, 1)], True, id="summed-not-per-job"),
    ],
)
def test_pods_are_ready_when_ready_and_succeeded_jobs_sum_to_the_replicas(
    rows: list[tuple[str, int, int]], ready: bool
) -> None:
    status = {"replicatedJobsStatus": [{"name": n, "ready": r, "succeeded": s} for n, r, s in rows]}
    doc = jobset(replicated("driver"), replicated("workers", replicas=2), status=status)

    assert pods_ready(msgspec.convert(doc, RawJobSet)) is ready


def test_a_number_past_int32_is_refused_naming_the_field() -> None:
    problems = problems_of(jobset(replicated("w", replicas=2**31)))

    assert len(problems) == 1
    assert "JobSet/ml/train" in problems[0]
    assert "replicatedJobs[0].replicas" in problems[0]


def test_an_unknown_field_is_refused_under_strict_validation() -> None:
    text = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: train, namespace: ml}
spec:
  replicatedJobs:
  - name: w
    replicaz: 2
    template: {spec: {template: {spec: {containers: [{name: c}]}}}}
"""
    _, errors = decode_yaml(text, validation="strict")

    assert [str(e) for e in errors] == [
        "JobSet/ml/train: spec.replicatedJobs[0].replicaz: unknown field"
    ]


@pytest.mark.parametrize(("parallelism", "completions"), [(None, None), (4, None), (4, 2), (0, 3)])
def test_one_child_job_asks_what_the_same_job_alone_asks(
    parallelism: int | None, completions: int | None
) -> None:
    rj = replicated("main", parallelism=parallelism, completions=completions, cpu="250m")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1"},
        "spec": rj["template"]["spec"],
    }

    (from_jobset,) = workload_of(jobset(rj)).pod_sets
    (from_job,) = workload_of(job).pod_sets

    assert (from_jobset.count, from_jobset.requests) == (from_job.count, from_job.requests)
