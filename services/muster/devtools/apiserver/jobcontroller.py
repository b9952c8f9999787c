"""A minimal Job controller for the stand-in (`ApiServer(job_controller=True)`), enough for a
queued Job's life: pods from the template while the Job is not suspended, none while it is,
and the Job's `Complete` / `Failed` conditions once its pods finish.

- Unsuspended: `startTime` is set; as many pods as `parallelism` (no more than the completions
  still missing) are created from the template, named `<job>-<random>`, controlled by the Job.
- Suspended: its active pods are deleted; condition `Suspended`.
- Succeeded pods count towards `completions`; once reached, `Complete` (and
  `SuccessCriteriaMet`). Failed pods beyond `backoffLimit`: `Failed` (`BackoffLimitExceeded`)
  and the active pods are deleted.
- A Job whose `spec.managedBy` names another controller is left alone (no pods, no status):
  its manager writes its status.
- Kubernetes v1.37's `WorkloadWithJob` (`workload_with_job`, when PodGroups are served): for a
  Job with `spec.scheduling`, a Workload and a PodGroup named after the Job, owned by it, with
  the Job's policy (`gang.minCount` defaulting to parallelism), and every pod's
  `spec.schedulingGroup` naming the PodGroup. Differs from Kubernetes: the real controller also
  creates them for a Job without `spec.scheduling` (a basic group); here only gangs get one.

Reconciles run deferred after the write that caused them, as a controller's would. Issue 15
grows this module (indexed Jobs, pod failure policies); it knows nothing of muster.
"""

from __future__ import annotations

import copy
from typing import Any

from muster.devtools.apiserver.deletion import Api, DeleteOptions
from muster.devtools.apiserver.errors import ApiError
from muster.devtools.apiserver.job_status import managed_elsewhere
from muster.devtools.apiserver.objects import JsonObj, meta, timestamp
from muster.devtools.apiserver.reconciler import Reconciler, controller_reference
from muster.devtools.apiserver.resources import Registry, ResourceType

JOBS = ("batch", "jobs")
PODS = ("", "pods")
FINISHED = ("Succeeded", "Failed")
SCHEDULING = "scheduling.k8s.io"


class JobController(Reconciler):
    """Subscribed to Jobs and Pods; one deferred reconcile per Job and burst of changes."""

    owned, kind, dependents = JOBS, "Job", PODS

    def __init__(self, api: Api, registry: Registry, *, workload_with_job: bool = True) -> None:
        super().__init__(api, registry)
        self.workload_with_job = workload_with_job

    def reconcile(self, namespace: str, name: str) -> None:
        jobs = self._rt(JOBS)
        job = self.api.store.get(jobs, (namespace, name))
        if job is None or meta(job).get("deletionTimestamp") or managed_elsewhere(job):
            return  # gone, going, or another controller's (spec.managedBy): left alone
        spec, status = job.get("spec") or {}, dict(job.get("status") or {})
        pods = self._pods_of(job)
        active = [p for p in pods if (p.get("status") or {}).get("phase") not in FINISHED]
        succeeded = sum((p.get("status") or {}).get("phase") == "Succeeded" for p in pods)
        failed = sum((p.get("status") or {}).get("phase") == "Failed" for p in pods)
        conditions = {c["type"]: c for c in status.get("conditions") or [] if isinstance(c, dict)}
        done = any(conditions.get(t, {}).get("status") == "True" for t in ("Complete", "Failed"))
        completions = spec.get("completions")
        now = timestamp(self.api.clock())
        if not done and completions is not None and succeeded >= completions:
            for kind in ("SuccessCriteriaMet", "Complete"):
                conditions[kind] = _condition(kind, "", now)
            status["completionTime"] = now
            done = True
        elif not done and failed > spec.get("backoffLimit", 6):
            for kind in ("FailureTarget", "Failed"):
                conditions[kind] = _condition(kind, "BackoffLimitExceeded", now)
            done = True
        if done or spec.get("suspend"):
            self._delete(active)
            active = []
            if spec.get("suspend") and not done:
                conditions["Suspended"] = _condition("Suspended", "JobSuspended", now)
        else:
            conditions.pop("Suspended", None)
            status.setdefault("startTime", now)
            missing = (completions - succeeded) if completions is not None else 1 - succeeded
            want = max(0, min(spec.get("parallelism", 1), missing))
            group = self._scheduling_group(job)
            active += [self._create_pod(job, group) for _ in range(want - len(active))]
        ready = sum(_ready(p) for p in active)  # the Job controller's status.ready
        status.update(active=len(active), ready=ready, succeeded=succeeded, failed=failed)
        status["conditions"] = list(conditions.values())
        if status != (job.get("status") or {}):
            self._write_status(jobs, job, status)

    def _pods_of(self, job: JsonObj) -> list[JsonObj]:
        pods = self._rt(PODS)
        uid = str(meta(job).get("uid", ""))
        return [
            obj
            for rt_key, key in self.api.store.dependents(uid)
            if rt_key == PODS and (obj := self.api.store.get(pods, key)) is not None
        ]

    def _create_pod(self, job: JsonObj, group: str) -> JsonObj:
        md = meta(job)
        template = copy.deepcopy(job["spec"].get("template") or {})
        pod_meta = template.get("metadata") or {}
        pod_spec = template.get("spec") or {}
        if group:
            pod_spec["schedulingGroup"] = {"podGroupName": group}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{md['name']}-",
                "namespace": md["namespace"],
                "labels": pod_meta.get("labels") or {},
                "annotations": pod_meta.get("annotations") or {},
                "ownerReferences": [controller_reference(job, "batch/v1", "Job")],
            },
            "spec": pod_spec,
        }
        return self.api.create(self._rt(PODS), "v1", str(md["namespace"]), body)

    def _delete(self, pods: list[JsonObj]) -> None:
        for pod in pods:
            md = meta(pod)
            try:
                self.api.delete(
                    self._rt(PODS),
                    "v1",
                    str(md["namespace"]),
                    str(md["name"]),
                    DeleteOptions(propagation_policy="Background"),
                )
            except ApiError:  # gone meanwhile
                continue

    def _write_status(self, jobs: ResourceType, job: JsonObj, status: JsonObj) -> None:
        md = meta(job)
        body = {**job, "status": status}
        try:
            self.api.update(
                jobs, "v1", str(md["namespace"]), str(md["name"]), body, subresource="status"
            )
        except ApiError:  # changed meanwhile: that change enqueued another reconcile
            return

    # --- WorkloadWithJob ------------------------------------------------------------------

    def _scheduling_group(self, job: JsonObj) -> str:
        """The PodGroup the Job's pods join ("" for none), created with its Workload."""
        scheduling = (job.get("spec") or {}).get("scheduling")
        groups = self.registry.by_key((SCHEDULING, "podgroups"))
        workloads = self.registry.by_key((SCHEDULING, "workloads"))
        if not self.workload_with_job or not scheduling or groups is None or workloads is None:
            return ""
        policy = scheduling.get("schedulingPolicy") or {}
        if "gang" not in policy:
            return ""
        version = groups.preferred_version
        md = meta(job)
        namespace, name = str(md["namespace"]), str(md["name"])
        if self.api.store.get(groups, (namespace, name)) is not None:
            return name
        min_count = (policy.get("gang") or {}).get("minCount") or job["spec"].get("parallelism", 1)
        group_spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
        for field in ("schedulingConstraints", "disruptionMode"):
            if field in scheduling:
                group_spec[field] = copy.deepcopy(scheduling[field])
        template = {"name": "job", **group_spec}
        owned = {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [controller_reference(job, "batch/v1", "Job")],
        }
        workload = {"metadata": copy.deepcopy(owned), "spec": {"podGroupTemplates": [template]}}
        if self.api.store.get(workloads, (namespace, name)) is None:
            self.api.create(workloads, version, namespace, workload)
        group_spec["workloadRef"] = {"workloadName": name, "templateName": "job"}
        self.api.create(groups, version, namespace, {"metadata": owned, "spec": group_spec})
        return name


def _condition(kind: str, reason: str, now: str) -> JsonObj:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def _ready(pod: JsonObj) -> bool:
    """Whether `pod`'s Ready condition is True (what a Job's `status.ready` counts)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
