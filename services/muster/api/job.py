"""batch/v1 Job to the Workload Kueue would create for it.

The rules, as Kueue's Job integration applies them:
- queue: label `kueue.x-k8s.io/queue-name`, else the annotation of that name, else "" (the
  namespace's LocalQueue "default");
- priority: label `kueue.x-k8s.io/priority-class` names a WorkloadPriorityClass, else the pod
  template's `priorityClassName` names a scheduling.k8s.io PriorityClass;
- one podset "main" of min(parallelism, completions) pods (parallelism defaults to 1), with
  `min_count` from annotation `kueue.x-k8s.io/job-min-parallelism` (partial admission);
- name `job-<job name>-<5 hex digits>`, see `workload_name_for_job`;
- `spec.scheduling` (Kubernetes v1.37) kept as the workload's `scheduling`: its pods are one
  group with that policy (`gang.minCount` defaults to parallelism and may not exceed it);
- status.reclaimablePods from the Job's finished pods (`job_reclaim`).
"""

from __future__ import annotations

import re

from muster.api.errors import ObjectErrors, key_path
from muster.api.job_reclaim import job_reclaimable_pods
from muster.api.model import Workload
from muster.api.owned import (
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_KEY,
    owned_workload_meta,
    owner_priority_class,
    owner_queue_name,
    workload_name_for_owner,
)
from muster.api.podspec import pod_set_from_template
from muster.api.raw import RawJob, RawJobSpec
from muster.api.scheduling_objects import job_scheduling
from muster.api.validate import MAX_WORKLOAD_PODS

__all__ = ["PRIORITY_CLASS_LABEL", "QUEUE_NAME_KEY", "workload_from_job", "workload_name_for_job"]

MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
POD_SET_NAME = "main"
_INTEGER = re.compile(r"[+-]?[0-9]{1,10}", re.ASCII)


def workload_name_for_job(job_name: str, job_uid: str) -> str:
    """Return `job-<job name>-<hash>` (`owned.workload_name_for_owner`)."""
    return workload_name_for_owner("batch/v1", "Job", job_name, job_uid)


def workload_from_job(raw: RawJob, errs: ObjectErrors, *, namespace: str) -> Workload:
    """Return the Workload for Job `raw`; problems go to `errs` with the Job's field paths."""
    count = job_pod_count(raw.spec, errs, path="spec")
    if count > MAX_WORKLOAD_PODS:
        errs.add(
            "spec.parallelism",
            f"must be at most {MAX_WORKLOAD_PODS} (pods in one workload), got {_parallelism(raw)}",
        )
    pod_set = pod_set_from_template(
        raw.spec.template,
        errs,
        name=POD_SET_NAME,
        count=count,
        min_count=_min_count(raw, count, errs),
        path="spec.template",
    )
    priority_class, source = owner_priority_class(
        raw.metadata, [raw.spec.template.spec.priority_class_name or ""]
    )
    scheduling = raw.spec.scheduling
    return Workload(
        meta=owned_workload_meta(
            raw.metadata, namespace=namespace, api_version="batch/v1", kind="Job"
        ),
        queue_name=owner_queue_name(raw.metadata, errs),
        pod_sets=(pod_set,),
        reclaimable_pods=job_reclaimable_pods(raw, pod_set=POD_SET_NAME, count=count),
        priority_class_name=priority_class,
        priority_class_source=source,
        scheduling=(
            job_scheduling(scheduling, parallelism=_parallelism(raw), errs=errs)
            if scheduling is not None
            else None
        ),
    )


def _parallelism(raw: RawJob) -> int:
    return raw.spec.parallelism if raw.spec.parallelism is not None else 1


def job_pod_count(spec: RawJobSpec, errs: ObjectErrors, *, path: str) -> int:
    """How many pods a Job of `spec` runs at once: parallelism (default 1), capped by
    completions when that is set (Kueue's `PodsCountPerReplica`); `path` is the spec's."""
    parallelism = spec.parallelism if spec.parallelism is not None else 1
    completions = spec.completions
    if parallelism < 0:
        errs.add(f"{path}.parallelism", f"must be >= 0, got {parallelism}")
    if completions is not None and completions < 0:
        errs.add(f"{path}.completions", f"must be >= 0, got {completions}")
    return max(min(parallelism, completions if completions is not None else parallelism), 0)


def _min_count(raw: RawJob, count: int, errs: ObjectErrors) -> int | None:
    text = raw.metadata.annotations.get(MIN_PARALLELISM_ANNOTATION)
    if text is None:
        return None
    path = key_path("metadata.annotations", MIN_PARALLELISM_ANNOTATION)
    if not _INTEGER.fullmatch(text):  # int() would also take "١٢" and "1_0"
        errs.add(path, f'must be an integer, got "{text[:40]}"')
        return None
    value = int(text)
    # Kueue's Job webhook: greater than 0 and less than the Job's parallelism.
    if value < 1 or value >= count:
        errs.add(path, f"must be >= 1 and < the pod count {count}, got {value}")
        return None
    return value
