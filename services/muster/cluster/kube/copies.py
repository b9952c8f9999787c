"""A workload's copy in a worker cluster (MultiKueue): pure functions from the objects as
submitted in the manager to the objects to create in the worker, and back from a worker's
object to the manager's workload it copies.

As Kueue's MultiKueue makes remote objects: the Job keeps its name, namespace, labels,
annotations and spec, minus what the manager's API server set (`spec.selector` and the
template's controller labels: the worker's server sets its own) and minus `spec.managedBy`
(so the worker's Job controller runs it); it is labelled with its origin
(`kueue.x-k8s.io/multikueue-origin`: here the muster cluster it was submitted in) and with the
manager's Workload name (`kueue.x-k8s.io/prebuilt-workload-name`), and annotated with the
manager object's uid (`kueue.x-k8s.io/multikueue-origin-uid`). A JobSet is copied alike, as
Kueue's JobSet MultiKueue adapter does (ff69552e79, jobset_multikueue_adapter.go `SyncJob`):
metadata for creation, its spec whole minus `managedBy`, so the worker's JobSet controller
runs it. A bare Kueue Workload is copied the same way (its pods are then created from the copy,
owned by it).

Differs from Kueue: Kueue copies the Workload too, for the worker's own Kueue to admit; muster
admitted it already and the worker's muster services place and run the copy (the Job starts
unsuspended, with its flavors' node selector and tolerations), so a Job's copy is the Job
alone, and a JobSet's the JobSet.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from muster.api.wellknown import MULTIKUEUE_CONTROLLER

ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
ORIGIN_UID_ANNOTATION = "kueue.x-k8s.io/multikueue-origin-uid"
# Labels the API server puts on a Job's pod template: the worker's server puts its own.
_CONTROLLER_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)
_KEPT_META = ("name", "namespace", "labels", "annotations")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _cloned_meta(obj: Mapping[str, Any], *, origin: str, workload: str) -> dict[str, Any]:
    """The metadata of a copy: name, namespace, labels and annotations, plus the origin's."""
    source = _meta(obj)
    meta = {k: copy.deepcopy(source[k]) for k in _KEPT_META if k in source}
    labels = meta.setdefault("labels", {})
    labels[ORIGIN_LABEL] = origin
    labels[PREBUILT_WORKLOAD_LABEL] = workload
    uid = source.get("uid")
    if uid:
        meta.setdefault("annotations", {})[ORIGIN_UID_ANNOTATION] = str(uid)
    return meta


def owner_copy(owner: Mapping[str, Any], *, origin: str, workload: str) -> dict[str, Any]:
    """The object to create in a worker for manager Job or JobSet `owner` (as its owner wrote
    it), which Kueue Workload `workload` stands for; still suspended, as submitted (the binder
    starts it in the same write)."""
    kind = str(owner.get("kind") or "Job")
    spec = copy.deepcopy(dict(owner.get("spec") or {}))
    spec.pop("managedBy", None)
    if kind == "Job":
        spec.pop("selector", None)
        template_meta = (spec.get("template") or {}).get("metadata")
        if isinstance(template_meta, dict) and isinstance(template_meta.get("labels"), dict):
            labels = template_meta["labels"]
            for label in _CONTROLLER_LABELS:
                labels.pop(label, None)
    return {
        "apiVersion": owner.get("apiVersion") or "batch/v1",
        "kind": kind,
        "metadata": _cloned_meta(owner, origin=origin, workload=workload),
        "spec": spec,
    }


def workload_copy(wl: Mapping[str, Any], *, origin: str) -> dict[str, Any]:
    """The Kueue Workload to create in a worker for bare Workload `wl` (as submitted); its
    pods are then made from the copy's podsets, owned by it."""
    name = str(_meta(wl).get("name", ""))
    return {
        "apiVersion": wl.get("apiVersion"),
        "kind": "Workload",
        "metadata": _cloned_meta(wl, origin=origin, workload=name),
        "spec": copy.deepcopy(dict(wl.get("spec") or {})),
    }


def managed_by_multikueue(job: Mapping[str, Any]) -> bool:
    """Whether `job` (a batch/v1 Job or a JobSet in the manager) is managed by MultiKueue
    (`spec.managedBy`): its controller leaves it alone and its status is its copy's."""
    spec = job.get("spec")
    return isinstance(spec, Mapping) and spec.get("managedBy") == MULTIKUEUE_CONTROLLER


def origin_of(obj: Mapping[str, Any]) -> str:
    """The cluster `obj` is a copy from ("" when it is not a copy)."""
    return str((_meta(obj).get("labels") or {}).get(ORIGIN_LABEL) or "")


def copied_workload(obj: Mapping[str, Any]) -> str:
    """The key "<namespace>/<name>" of the manager's workload `obj` copies ("" when none)."""
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    if not labels.get(ORIGIN_LABEL):
        return ""
    name = labels.get(PREBUILT_WORKLOAD_LABEL) or (meta.get("name") if _is_workload(obj) else "")
    return f"{meta.get('namespace', '')}/{name}" if name else ""


def _is_workload(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Workload"
