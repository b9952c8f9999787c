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

import hashlib
import re

from muster.api.convert import (
    POD_PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    meta_from_raw,
    stable_uid,
)
from muster.api.errors import ObjectErrors, key_path
from muster.api.job_reclaim import job_reclaimable_pods
from muster.api.model import ObjectMeta, OwnerReference, PriorityClassSource, Workload
from muster.api.names import LABEL_VALUE_MAX, check_reference
from muster.api.podspec import pod_set_from_template
from muster.api.raw import RawJob
from muster.api.scheduling_objects import job_scheduling
from muster.api.validate import MAX_WORKLOAD_PODS

QUEUE_NAME_KEY = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
POD_SET_NAME = "main"
_INTEGER = re.compile(r"[+-]?[0-9]{1,10}", re.ASCII)
# Each pod of the Job is labelled with its Workload's name (`muster.dev/workload`), and a label
# value has at most 63 characters: a longer name made a Job the API server would not start.
_MAX_NAME = LABEL_VALUE_MAX


def workload_name_for_job(job_name: str, job_uid: str) -> str:
    """Return `job-<job name>-<hash>`, the hash being 5 hex digits of sha256 over name and uid.

    Stable for the same Job; two Jobs with the same name but different uids get different
    names. Long job names are cut so the result is at most 63 characters: a label value, as
    each pod carries it (Differs from Kueue, which cuts at 253 because it labels no pod so).
    """
    digest = hashlib.sha256(f"batch/v1/Job/{job_name}/{job_uid}".encode()).hexdigest()[:5]
    prefix = f"job-{job_name}"[: _MAX_NAME - 6].rstrip("-.")
    return f"{prefix}-{digest}"


def workload_from_job(raw: RawJob, errs: ObjectErrors, *, namespace: str) -> Workload:
    """Return the Workload for Job `raw`; problems go to `errs` with the Job's field paths."""
    job_meta = raw.metadata
    job_uid = job_meta.uid or stable_uid("Job", namespace, job_meta.name)
    name = workload_name_for_job(job_meta.name, job_uid)
    base = meta_from_raw(job_meta, namespace=namespace)
    meta = ObjectMeta(
        name=name,
        namespace=namespace,
        uid=stable_uid("Workload", namespace, name),
        labels=base.labels,
        annotations=base.annotations,
        creation_timestamp=base.creation_timestamp,
        owner_references=(
            OwnerReference(
                api_version="batch/v1", kind="Job", name=job_meta.name, uid=job_uid, controller=True
            ),
        ),
    )
    count = _pod_count(raw, errs)
    pod_set = pod_set_from_template(
        raw.spec.template,
        errs,
        name=POD_SET_NAME,
        count=count,
        min_count=_min_count(raw, count, errs),
        path="spec.template",
    )
    priority_class, source = _priority_class(raw)
    # Kueue's Job webhook: the queue and priority class labels must name objects.
    for where, keys in (
        ("metadata.labels", job_meta.labels),
        ("metadata.annotations", job_meta.annotations),
    ):
        for key in (QUEUE_NAME_KEY, PRIORITY_CLASS_LABEL):
            check_reference(errs, keys.get(key), key_path(where, key))
    scheduling = raw.spec.scheduling
    return Workload(
        meta=meta,
        queue_name=job_meta.labels.get(QUEUE_NAME_KEY)
        or job_meta.annotations.get(QUEUE_NAME_KEY, ""),
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


def _pod_count(raw: RawJob, errs: ObjectErrors) -> int:
    """Return how many pods run at once: parallelism, capped by completions when that is set."""
    parallelism = raw.spec.parallelism if raw.spec.parallelism is not None else 1
    completions = raw.spec.completions
    if parallelism < 0:
        errs.add("spec.parallelism", f"must be >= 0, got {parallelism}")
    if completions is not None and completions < 0:
        errs.add("spec.completions", f"must be >= 0, got {completions}")
    count = max(min(parallelism, completions if completions is not None else parallelism), 0)
    if count > MAX_WORKLOAD_PODS:
        errs.add(
            "spec.parallelism",
            f"must be at most {MAX_WORKLOAD_PODS} (pods in one workload), got {parallelism}",
        )
    return count


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


def _priority_class(raw: RawJob) -> tuple[str | None, PriorityClassSource | None]:
    wpc = raw.metadata.labels.get(PRIORITY_CLASS_LABEL)
    if wpc:
        return wpc, WORKLOAD_PRIORITY_CLASS
    pod_class = raw.spec.template.spec.priority_class_name
    if pod_class:
        return pod_class, POD_PRIORITY_CLASS
    return None, None
