"""jobset.x-k8s.io/v1alpha2 JobSet to the Workload Kueue would create for it.

The rules, as Kueue's JobSet integration applies them (ff69552e79,
pkg/controller/jobs/jobset/jobset_controller.go):
- one podset per replicatedJob, named after it, in spec order, from its Job template's pod
  template; count = replicas x the pods one Job runs at once (parallelism, default 1, capped by
  completions: `PodsCountPerReplica`); no minCount (Kueue's JobSet has no partial admission);
- queue and priority as for every job integration (`muster.api.owned`): label
  `kueue.x-k8s.io/queue-name`, label `kueue.x-k8s.io/priority-class`, else the first
  replicatedJob's pod template that names a `priorityClassName`;
- name `jobset-<JobSet name>-<5 hex digits>`, see `workload_name_for_jobset`;
- status.reclaimablePods: a replicatedJob with 0 < succeeded <= replicas child Jobs has
  succeeded x pods-per-Job reclaimable (`ReclaimablePods`);
- finished when condition Completed or Failed is True (`Finished`; the watcher's
  `translate.job_finished`);
- its pods ready (waitForPodsReady) when its child Jobs ready or succeeded, summed over
  `status.replicatedJobsStatus`, are as many as `replicas` summed over its replicatedJobs
  (`PodsReady`, `pods_ready`).

Hostile input is refused naming the JobSet's field: no replicatedJobs or more than a Workload's
podsets, a name that is no DNS-1123 label or is repeated, negative replicas, and more pods in
all than a workload may have (replicas and parallelism are int32s: their product is not).

A JobSet managed by MultiKueue (`spec.managedBy: kueue.x-k8s.io/multikueue`) makes the same
Workload: its queue's MultiKueue check dispatches it to a worker cluster, where its copy runs
(`muster.cluster.kube.copies`, Kueue's jobset_multikueue_adapter.go).
"""

from __future__ import annotations

from typing import Final

from muster.api.errors import ObjectErrors
from muster.api.job import job_pod_count
from muster.api.model import PodSet, ReclaimablePod, Workload
from muster.api.names import dns1123_label_problem
from muster.api.owned import (
    owned_workload_meta,
    owner_priority_class,
    owner_queue_name,
    workload_name_for_owner,
)
from muster.api.podspec import pod_set_from_template
from muster.api.raw import RawJobSet, RawReplicatedJob
from muster.api.validate import MAX_POD_SETS, MAX_WORKLOAD_PODS

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND = "JobSet"
# The owners (apiVersion, kind) whose Kueue Workload muster makes itself: Kueue's job
# integrations that muster has (batch/v1 Job, JobSet).
INTEGRATION_KINDS: Final = frozenset({("batch/v1", "Job"), (JOBSET_API_VERSION, JOBSET_KIND)})
_REPLICATED_JOBS = "spec.replicatedJobs"


def workload_name_for_jobset(name: str, uid: str) -> str:
    """Return `jobset-<JobSet name>-<hash>` (`owned.workload_name_for_owner`)."""
    return workload_name_for_owner(JOBSET_API_VERSION, JOBSET_KIND, name, uid)


def workload_from_jobset(raw: RawJobSet, errs: ObjectErrors, *, namespace: str) -> Workload:
    """Return the Workload for JobSet `raw`; problems go to `errs` with the JobSet's paths."""
    replicated = raw.spec.replicated_jobs
    if not replicated:
        errs.add(_REPLICATED_JOBS, "must list at least 1 replicatedJob")
    if len(replicated) > MAX_POD_SETS:
        errs.add(
            _REPLICATED_JOBS,
            f"must list at most {MAX_POD_SETS} replicatedJobs (a Workload's podsets),"
            f" got {len(replicated)}",
        )
    per_job = [
        job_pod_count(rj.template.spec, errs, path=f"{_REPLICATED_JOBS}[{i}].template.spec")
        for i, rj in enumerate(replicated)
    ]
    pod_sets = tuple(_pod_set(rj, i, per_job[i], errs) for i, rj in enumerate(replicated))
    _check_names(replicated, errs)
    total = sum(ps.count for ps in pod_sets)
    if total > MAX_WORKLOAD_PODS:
        errs.add(
            _REPLICATED_JOBS,
            f"must ask for at most {MAX_WORKLOAD_PODS} pods in all (replicas x parallelism"
            f" summed), got {total}",
        )
    priority_class, source = owner_priority_class(
        raw.metadata,
        (rj.template.spec.template.spec.priority_class_name or "" for rj in replicated),
    )
    return Workload(
        meta=owned_workload_meta(
            raw.metadata, namespace=namespace, api_version=JOBSET_API_VERSION, kind=JOBSET_KIND
        ),
        queue_name=owner_queue_name(raw.metadata, errs),
        pod_sets=pod_sets,
        reclaimable_pods=_reclaimable_pods(raw, per_job),
        priority_class_name=priority_class,
        priority_class_source=source,
    )


def _pod_set(rj: RawReplicatedJob, index: int, per_job: int, errs: ObjectErrors) -> PodSet:
    """replicatedJob `rj`'s podset: `replicas` x `per_job` pods of its Job's pod template."""
    path = f"{_REPLICATED_JOBS}[{index}]"
    if rj.replicas < 0:
        errs.add(f"{path}.replicas", f"must be >= 0, got {rj.replicas}")
    return pod_set_from_template(
        rj.template.spec.template,
        errs,
        name=rj.name,
        count=max(rj.replicas, 0) * per_job,
        min_count=None,
        path=f"{path}.template.spec.template",
    )


def _check_names(replicated: list[RawReplicatedJob], errs: ObjectErrors) -> None:
    """Each replicatedJob's name is its podset's: a DNS-1123 label, unique in the JobSet."""
    seen: set[str] = set()
    for i, rj in enumerate(replicated):
        path = f"{_REPLICATED_JOBS}[{i}].name"
        problem = "is required" if not rj.name else dns1123_label_problem(rj.name)
        if problem is not None:
            errs.add(path, problem)
        elif rj.name in seen:
            errs.add(path, f'duplicate replicatedJob name "{rj.name}"')
        seen.add(rj.name)


def _reclaimable_pods(raw: RawJobSet, per_job: list[int]) -> tuple[ReclaimablePod, ...]:
    """Kueue's `ReclaimablePods`: a replicatedJob's succeeded child Jobs (of `per_job` pods
    each) no longer need their pods, when 0 < succeeded <= replicas (a status claiming more is
    not believed)."""
    succeeded = {s.name: s.succeeded for s in raw.status.replicated_jobs_status}
    return tuple(
        ReclaimablePod(name=rj.name, count=succeeded[rj.name] * pods)
        for rj, pods in zip(raw.spec.replicated_jobs, per_job, strict=True)
        if 0 < succeeded.get(rj.name, 0) <= rj.replicas
    )


def pods_ready(raw: RawJobSet) -> bool:
    """Kueue's `PodsReady` of a JobSet: its child Jobs ready plus succeeded, summed over
    `status.replicatedJobsStatus`, equal its replicas summed over `spec.replicatedJobs` (a
    JobSet of no replicas is ready, as in Kueue)."""
    replicas = sum(rj.replicas for rj in raw.spec.replicated_jobs)
    counted = sum(s.ready + s.succeeded for s in raw.status.replicated_jobs_status)
    return replicas == counted
