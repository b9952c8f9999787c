"""What the real API server requires of a Job's status written by another manager than the
Job controller (`spec.managedBy`, Kubernetes' JobManagedBy): the rules its status
validation applies so that clients of the Job API can trust a status whoever wrote it.

- Counts (`active`, `ready`, `succeeded`, `failed`, `terminating`) are never negative;
  `succeeded` and `failed` never go down; `ready` is never above `active`.
- A Job finished (`Complete` or `Failed` True) has a `startTime` and no active pods, and stays
  finished (the condition cannot be turned off or removed); not both.
- `Complete` needs `SuccessCriteriaMet`, `Failed` needs `FailureTarget`; `Complete` and
  `FailureTarget` do not go together.
- `completionTime` is set exactly when `Complete` is, never changes once set, and is not
  before `startTime`.
- While the Job is not suspended, a `startTime` once set does not change.

Differs from Kubernetes: the real server applies these rules to every Job's status (its own
controller meets them); the stand-in checks only Jobs managed elsewhere, whose status nobody
but their manager writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from muster.devtools.apiserver.errors import Cause, bad_value, forbidden, required

JOB_CONTROLLER = "kubernetes.io/job-controller"  # managedBy's default: the Job controller
_COUNTS = ("active", "ready", "succeeded", "failed", "terminating")


def managed_elsewhere(job: Mapping[str, Any]) -> bool:
    """Whether another controller than Kubernetes' Job controller manages `job`."""
    managed_by = (job.get("spec") or {}).get("managedBy")
    return managed_by not in (None, JOB_CONTROLLER)


def job_status_causes(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """Why the API server refuses `new`'s status over `old`'s (none: it accepts it)."""
    status, before = new.get("status") or {}, old.get("status") or {}
    causes = _count_causes(status, before)
    true, was = _true_conditions(status), _true_conditions(before)
    finished = true & {"Complete", "Failed"}
    for kind in sorted(was & {"Complete", "Failed"} - true):
        causes.append(forbidden("status.conditions", f"cannot disable the {kind} condition"))
    if finished:
        if not status.get("startTime"):
            causes.append(required("status.startTime", "a finished job has a startTime"))
        if status.get("active"):
            causes.append(bad_value("status.active", status["active"], "must be 0 when finished"))
    if finished == {"Complete", "Failed"}:
        causes.append(forbidden("status.conditions", "cannot be both Complete and Failed"))
    for kind, needs in (("Complete", "SuccessCriteriaMet"), ("Failed", "FailureTarget")):
        if kind in true and needs not in true:
            causes.append(forbidden("status.conditions", f"{kind} needs the {needs} condition"))
    if "Complete" in true and "FailureTarget" in true:
        causes.append(forbidden("status.conditions", "cannot be Complete with FailureTarget"))
    return causes + _time_causes(new, status, before, complete="Complete" in true)


def _count_causes(status: Mapping[str, Any], before: Mapping[str, Any]) -> list[Cause]:
    causes = []
    for field in _COUNTS:
        value = status.get(field, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            causes.append(bad_value(f"status.{field}", value, "must be a count (0 or more)"))
    if causes:
        return causes
    causes.extend(
        bad_value(f"status.{field}", status.get(field, 0), "cannot decrease")
        for field in ("succeeded", "failed")
        if status.get(field, 0) < before.get(field, 0)
    )
    if status.get("ready", 0) > status.get("active", 0):
        causes.append(bad_value("status.ready", status["ready"], "cannot exceed active"))
    return causes


def _time_causes(
    job: Mapping[str, Any], status: Mapping[str, Any], before: Mapping[str, Any], *, complete: bool
) -> list[Cause]:
    causes = []
    done, start = status.get("completionTime"), status.get("startTime")
    if complete and not done:
        causes.append(required("status.completionTime", "a Complete job has a completionTime"))
    if done and not complete:
        causes.append(forbidden("status.completionTime", "only a Complete job has one"))
    if before.get("completionTime") and done != before["completionTime"]:
        causes.append(bad_value("status.completionTime", done, "cannot be changed once set"))
    if done and start and str(done) < str(start):  # RFC 3339 UTC times order as text
        causes.append(bad_value("status.completionTime", done, "cannot be before startTime"))
    suspended = bool((job.get("spec") or {}).get("suspend"))
    if before.get("startTime") and start != before["startTime"] and not suspended:
        causes.append(
            required("status.startTime", "cannot be removed or changed for an unsuspended job")
        )
    return causes


def _true_conditions(status: Mapping[str, Any]) -> set[str]:
    return {
        str(c.get("type"))
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("status") == "True"
    }
