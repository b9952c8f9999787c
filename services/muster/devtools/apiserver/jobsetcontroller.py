"""A minimal JobSet controller for the stand-in (`ApiServer(job_controller=True)`, beside the
Job controller), enough for a queued JobSet's life as jobset.x-k8s.io's controller leads it:

- Child Jobs: `replicas` Jobs per replicatedJob, named `<jobset>-<replicatedJob>-<index>`,
  controlled by the JobSet, labelled `jobset.sigs.k8s.io/jobset-name`, `.../replicatedjob-name`
  and `.../job-index`, each the replicatedJob's Job template, suspended as the JobSet is.
- Suspend propagated: a suspended JobSet suspends its running children (their Job controller
  then deletes their pods). Resumed, each suspended child gets its replicatedJob's pod template
  labels, annotations, node selector and tolerations (what Kueue injected into the JobSet),
  its start time cleared first (the API server allows a template change only then), and is
  unsuspended.
- A JobSet whose `spec.managedBy` names another controller (MultiKueue's) is left alone: no
  child Jobs, no status (its status is that controller's to write).
- Status: `replicatedJobsStatus` (ready, succeeded, failed, active, suspended child Jobs per
  replicatedJob; a running Job is ready once the pods it runs at once are ready or
  succeeded); `Completed` once every child Job is Complete, `Failed` once one Failed (no
  restarts: `failurePolicy` is not read), `Suspended` while suspended.

Reconciles run deferred after the write that caused them. It knows nothing of muster.
"""

from __future__ import annotations

import copy
from typing import Any

from muster.devtools.apiserver.errors import ApiError
from muster.devtools.apiserver.objects import JsonObj, meta, timestamp
from muster.devtools.apiserver.reconciler import Reconciler, controller_reference

JOBSETS = ("jobset.x-k8s.io", "jobsets")
JOBS = ("batch", "jobs")
VERSION = "v1alpha2"
LABEL = "jobset.sigs.k8s.io/"
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"  # managedBy's default: this controller
# What a resume copies from the JobSet's pod templates into a suspended child's.
_RESUMED_META = ("labels", "annotations")
_RESUMED_SPEC = ("nodeSelector", "tolerations")


class JobSetController(Reconciler):
    """Subscribed to JobSets and Jobs; one deferred reconcile per JobSet and burst of changes."""

    owned, kind, dependents = JOBSETS, "JobSet", JOBS

    def reconcile(self, namespace: str, name: str) -> None:
        jobsets, jobs = self._rt(JOBSETS), self._rt(JOBS)
        jobset = self.api.store.get(jobsets, (namespace, name))
        if jobset is None or meta(jobset).get("deletionTimestamp"):
            return
        spec, status = jobset.get("spec") or {}, dict(jobset.get("status") or {})
        if spec.get("managedBy") not in (None, CONTROLLER_NAME):
            return  # another controller's
        suspended = bool(spec.get("suspend"))
        conditions = {c["type"]: c for c in status.get("conditions") or [] if isinstance(c, dict)}
        finished = any(
            conditions.get(t, {}).get("status") == "True" for t in ("Completed", "Failed")
        )
        counts, children = [], []
        for rj in spec.get("replicatedJobs") or []:
            mine = []
            for index in range(int(rj.get("replicas", 1))):
                child = self.api.store.get(jobs, (namespace, f"{name}-{rj['name']}-{index}"))
                if child is None and not finished:
                    child = self._create(jobset, rj, index)
                elif child is not None and not finished:
                    child = self._follow(child, rj, suspended=suspended)
                if child is not None:
                    mine.append(child)
            counts.append(_counts(str(rj.get("name", "")), mine))
            children += mine
        now = timestamp(self.api.clock())
        if not finished and children and all(_ended(c, "Complete") for c in children):
            conditions["Completed"] = _condition("Completed", "AllJobsCompleted", now)
        elif not finished and any(_ended(c, "Failed") for c in children):
            conditions["Failed"] = _condition("Failed", "FailedJobs", now)
        if suspended and not finished:
            conditions["Suspended"] = _condition("Suspended", "SuspendedJobs", now)
        else:
            conditions.pop("Suspended", None)
        status.update(replicatedJobsStatus=counts, conditions=list(conditions.values()))
        if status != (jobset.get("status") or {}):
            body = {**jobset, "status": status}
            try:
                self.api.update(jobsets, VERSION, namespace, name, body, subresource="status")
            except ApiError:  # changed meanwhile: that change enqueued another reconcile
                return

    def _create(self, jobset: JsonObj, rj: JsonObj, index: int) -> JsonObj | None:
        md = meta(jobset)
        template = copy.deepcopy(rj.get("template") or {})
        job_meta = template.get("metadata") or {}
        labels = {
            **(job_meta.get("labels") or {}),
            f"{LABEL}jobset-name": md["name"],
            f"{LABEL}replicatedjob-name": rj["name"],
            f"{LABEL}job-index": str(index),
        }
        job_spec = template.get("spec") or {}
        job_spec["suspend"] = bool((jobset.get("spec") or {}).get("suspend"))
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{md['name']}-{rj['name']}-{index}",
                "namespace": md["namespace"],
                "labels": labels,
                "annotations": job_meta.get("annotations") or {},
                "ownerReferences": [
                    controller_reference(jobset, f"{JOBSETS[0]}/{VERSION}", "JobSet")
                ],
            },
            "spec": job_spec,
        }
        try:
            return self.api.create(self._rt(JOBS), "v1", str(md["namespace"]), body)
        except ApiError:  # refused (an invalid template): the JobSet never gets it
            return None

    def _follow(self, child: JsonObj, rj: JsonObj, *, suspended: bool) -> JsonObj:
        """`child` suspended or resumed as its JobSet is now."""
        if bool((child.get("spec") or {}).get("suspend")) == suspended or _ended(child):
            return child
        jobs, md = self._rt(JOBS), meta(child)
        namespace, name = str(md["namespace"]), str(md["name"])
        body = copy.deepcopy(child)
        try:
            if not suspended and (child.get("status") or {}).get("startTime"):
                status = {k: v for k, v in body["status"].items() if k != "startTime"}
                body = self.api.update(
                    jobs, "v1", namespace, name, {**body, "status": status}, subresource="status"
                )
                body = copy.deepcopy(body)
            body["spec"]["suspend"] = suspended
            if not suspended:
                _resume_template(body, rj)
            return self.api.update(jobs, "v1", namespace, name, body)
        except ApiError:  # changed meanwhile: that change enqueued another reconcile
            return child


def _resume_template(job: JsonObj, rj: JsonObj) -> None:
    """Copy what Kueue injected into the replicatedJob's pod template onto the child's: labels
    and annotations added (the Job's own selector labels stay), node selector and tolerations
    replaced."""
    source = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
    target = job["spec"].setdefault("template", {})
    for field in _RESUMED_META:
        value = (source.get("metadata") or {}).get(field)
        if value:
            target.setdefault("metadata", {}).setdefault(field, {}).update(copy.deepcopy(value))
    for field in _RESUMED_SPEC:
        value = (source.get("spec") or {}).get(field)
        if value:
            target.setdefault("spec", {})[field] = copy.deepcopy(value)
        else:
            (target.get("spec") or {}).pop(field, None)


def _ended(job: JsonObj, *kinds: str) -> bool:
    wanted = kinds or ("Complete", "Failed")
    return any(
        isinstance(c, dict) and c.get("type") in wanted and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _counts(name: str, children: list[JsonObj]) -> dict[str, Any]:
    def status(job: JsonObj) -> JsonObj:
        return job.get("status") or {}

    return {
        "name": name,
        "ready": sum(_job_ready(j) for j in children),
        "succeeded": sum(_ended(j, "Complete") for j in children),
        "failed": sum(_ended(j, "Failed") for j in children),
        "active": sum(bool(status(j).get("active")) for j in children),
        "suspended": sum(bool((j.get("spec") or {}).get("suspend")) for j in children),
    }


def _job_ready(job: JsonObj) -> bool:
    """A child Job counts as ready while it runs with all the pods it runs at once (its
    parallelism, capped by the completions left) ready or succeeded."""
    if _ended(job) or (job.get("spec") or {}).get("suspend"):
        return False
    spec, status = job.get("spec") or {}, job.get("status") or {}
    completions = spec.get("completions")
    at_once = int(spec.get("parallelism", 1))
    if completions is not None:
        at_once = min(at_once, int(completions))
    ready, succeeded = int(status.get("ready") or 0), int(status.get("succeeded") or 0)
    return at_once > 0 and ready + succeeded >= at_once


def _condition(kind: str, reason: str, now: str) -> JsonObj:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": "",
        "lastTransitionTime": now,
    }
