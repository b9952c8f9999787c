"""The manager's Jobs and JobSets that MultiKueue manages (`spec.managedBy:
kueue.x-k8s.io/multikueue`): their status is their copy's in the worker cluster the workload
runs on, as Kueue's MultiKueue keeps it (its JobSet adapter copies the whole status too).
Pure: folds the events `write_statuses` follows, returns the statuses to desire.

The worker's watcher publishes the copy's status each time it changes (`copy_status`); `RunsOn`
lets through only those of the cluster the workload was last admitted to. The API server
refuses to lower `succeeded` and `failed` of a Job managed elsewhere, so they stay at the
highest mirrored: a workload moved to another worker keeps what its pods did in the first.
When the workload is evicted, its Job is no longer running anywhere: `active`, `ready`,
`terminating` and `startTime` go (the manager's Job is suspended, so the server allows it),
and what its copy says while it is deleted counts for nothing until the next admission. A
JobSet's status has no such server rule; evicted, its replicatedJobs count no `active` or
`ready` child Job (Differs from Kueue, which leaves the last status copied, because the JobSet
runs nowhere then: its readiness would otherwise still read as ready). One that finished
(its kind's end condition: a Job's Complete, a JobSet's Completed, or Failed) keeps its last
status when evicted afterwards.

A Job without that managedBy is never written here: its Kueue Workload carries the story, and
the Job's own controller owns its status.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from muster.cluster.kube import copies
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.translate import end_conditions, is_owner

log = logging.getLogger(__name__)

Desire = tuple[ObjectRef, dict[str, Any]]

_NEVER_LOWER = ("succeeded", "failed")
_RUNNING = ("active", "ready", "terminating", "startTime")


class JobMirror:
    """What each workload's MultiKueue-managed Job should show (see the module docstring)."""

    def __init__(self) -> None:
        # workload → its Job (or JobSet), that object's uid
        self._jobs: dict[str, tuple[ObjectRef, str]] = {}
        self._status: dict[str, dict[str, Any]] = {}  # workload → the status desired last
        self._evicted: set[str] = set()  # workloads evicted since their last admission

    def apply(self, env: pb.Envelope) -> list[Desire]:
        """Fold `env` in; the Job statuses it changes."""
        field = env.WhichOneof("payload")
        if field == "submitted":
            self._learn(env.workload, env.submitted.owner_manifest_json)
        elif field == "deleted":
            self._jobs.pop(env.workload, None)
            self._status.pop(env.workload, None)
            self._evicted.discard(env.workload)
        elif field == "admitted":
            self._evicted.discard(env.workload)
        elif field == "copy_status" and env.workload not in self._evicted:
            return self._mirror(env.workload, env.copy_status.status_json)
        elif field == "evicted":
            self._evicted.add(env.workload)
            return self._stopped(env.workload)
        return []

    def desired(self) -> list[Desire]:
        """Every status desired so far (once the events at start are folded in)."""
        return [(self._jobs[w][0], s) for w, s in sorted(self._status.items()) if w in self._jobs]

    def _learn(self, workload: str, owner_json: str) -> None:
        ref, uid = managed_job(owner_json)
        if ref is None:
            self._jobs.pop(workload, None)
            self._status.pop(workload, None)
            return
        if self._jobs.get(workload, (ref, uid))[1] != uid:
            self._status.pop(workload, None)  # a new Job under the same name starts afresh
        self._jobs[workload] = (ref, uid)

    def _mirror(self, workload: str, status_json: str) -> list[Desire]:
        job = self._jobs.get(workload)
        if job is None:
            return []
        try:
            status = json.loads(status_json)
        except ValueError:
            status = None
        if not isinstance(status, dict):
            log.warning("ignoring a copy status of %s that is not a JSON object", workload)
            return []
        before = self._status.get(workload, {})
        for field in _NEVER_LOWER if job[0].kind == "Job" else ():
            if isinstance(before.get(field), int):
                status[field] = max(before[field], _count(status.get(field)))
        self._status[workload] = status
        return [(job[0], status)]

    def _stopped(self, workload: str) -> list[Desire]:
        job, before = self._jobs.get(workload), self._status.get(workload)
        if job is None or before is None or _finished(before, job[0].kind):
            return []
        status = _stopped_job(before) if job[0].kind == "Job" else _stopped_jobset(before)
        if status == before:
            return []
        self._status[workload] = status
        return [(job[0], status)]


def _stopped_job(status: Mapping[str, Any]) -> dict[str, Any]:
    """A Job's status once it runs nowhere: without its running fields."""
    return {k: v for k, v in status.items() if k not in _RUNNING}


def _stopped_jobset(status: Mapping[str, Any]) -> dict[str, Any]:
    """A JobSet's status once it runs nowhere: no replicatedJob has an active or ready Job."""
    counts = status.get("replicatedJobsStatus")
    if not isinstance(counts, list):
        return dict(status)
    stopped = [{**c, "active": 0, "ready": 0} if isinstance(c, Mapping) else c for c in counts]
    return {**status, "replicatedJobsStatus": stopped}


def managed_job(owner_json: str) -> tuple[ObjectRef | None, str]:
    """The Job or JobSet `owner_json` (a `submitted`'s owner manifest) is, and its uid, when
    MultiKueue manages it (`spec.managedBy`); (None, "") for any other object, or none."""
    try:
        owner = json.loads(owner_json) if owner_json else None
    except ValueError:
        return None, ""
    if not isinstance(owner, dict) or not is_owner(owner):
        return None, ""
    meta = owner.get("metadata")
    if not copies.managed_by_multikueue(owner):
        return None, ""
    if not isinstance(meta, dict) or not meta.get("name") or not meta.get("namespace"):
        return None, ""
    ref = ObjectRef(kind=owner["kind"], name=str(meta["name"]), namespace=str(meta["namespace"]))
    return ref, str(meta.get("uid", ""))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _finished(status: Mapping[str, Any], kind: str) -> bool:
    # A worker's status is anyone's JSON: `conditions` not a list (5, a string) tells nothing,
    # where iterating it raised at the next eviction, at each replay after it too.
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping)
        and c.get("type") in end_conditions(kind)
        and c.get("status") == "True"
        for c in conditions
    )
