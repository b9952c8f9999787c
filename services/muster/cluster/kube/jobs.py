"""Starting and stopping a Kueue-managed batch/v1 Job, as Kueue's Job integration does: pure
functions from the Job as read to the Job to write (None: nothing to write).

Start unsuspends the Job, sets its parallelism to the admitted count, and injects the admitted
flavors' node selector and tolerations into the pod template, plus muster's workload label and
podset annotation (so the Job's pods are watched and grouped like any muster pod). When the
admission covers other requests than the template's (a Job routed to an alternative,
docs/routing.md), the containers' requests and limits are rewritten to them (`resize`), in the
same write: the API server allows it while the Job is suspended (KEP-5440). What the template,
its containers' resources and parallelism were before is kept in annotation
`muster.dev/pod-template-original` on the Job, and put back on stop. The API server lets a
template change only while the Job is suspended and has no `status.startTime` (its resources:
no active pods), so stop is three writes: suspend, clear the start time (status), restore.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from muster.api.job import POD_SET_NAME, workload_name_for_job
from muster.api.model import Toleration
from muster.api.wellknown import POD_SET_ANNOTATION, WORKLOAD_LABEL
from muster.cluster.backend import ADMISSION_LABEL, PodSetStart, admission_of
from muster.cluster.kube.resize import (
    NO_RUNTIME_CLASSES,
    RuntimeOverheads,
    resized,
    resources_of,
    with_resources,
)

ORIGINAL_ANNOTATION = "muster.dev/pod-template-original"
# What start changes in the template: (where, field).
_TEMPLATE_FIELDS = (
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
)
_ABSENT = None  # a field the template did not have, in the saved original
_RESOURCES = "spec.resources"  # in the saved original: every container's `resources`


def toleration_manifest(t: Toleration) -> dict[str, str]:
    """A toleration as the API writes it (empty fields left out)."""
    return {k: v for k, v in msgspec.to_builtins(t).items() if v}


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def is_suspended(job: Mapping[str, Any]) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def is_started_by_muster(job: Mapping[str, Any]) -> bool:
    return not is_suspended(job) and ORIGINAL_ANNOTATION in (_meta(job).get("annotations") or {})


def workload_name(job: Mapping[str, Any]) -> str:
    """The Kueue Workload name of `job` (`job-<name>-<hash>`)."""
    meta = _meta(job)
    return workload_name_for_job(str(meta.get("name", "")), str(meta.get("uid", "")))


def _pod_set(pod_sets: Sequence[PodSetStart]) -> PodSetStart | None:
    """A Job's one podset ("main"; the first when none is called that)."""
    named = [ps for ps in pod_sets if ps.name == POD_SET_NAME]
    return named[0] if named else (pod_sets[0] if pod_sets else None)


def admission_of_job(job: Mapping[str, Any]) -> int:
    """The admission sequence that started `job` (its pod template's label; 0: none)."""
    template = (job.get("spec") or {}).get("template") or {}
    return admission_of(template) if not is_suspended(job) else 0


def started_job(
    job: Mapping[str, Any],
    pod_sets: Sequence[PodSetStart],
    *,
    workload: str,
    admission: int = 0,
    runtime_classes: RuntimeOverheads = NO_RUNTIME_CLASSES,
) -> dict[str, Any] | None:
    """`job` unsuspended with the admitted podset's placement injected, its containers asking
    for the admitted requests when routed; None when started. Raises `resize.ResizeError`
    when the template cannot ask for exactly those requests (`runtime_classes`: the overhead
    of the RuntimeClass it names, `resize.resized`).

    Its pods are labelled with `admission` (when given): an eviction stops the Job only when
    it carries out an eviction of that admission or a later one.
    """
    if not is_suspended(job):
        return None
    out = copy.deepcopy(dict(job))
    spec = out.setdefault("spec", {})
    template = spec.setdefault("template", {})
    annotations = out.setdefault("metadata", {}).setdefault("annotations", {})
    if ORIGINAL_ANNOTATION not in annotations:  # a retried start keeps the first original
        original = template_original(template)
        original["parallelism"] = spec.get("parallelism", _ABSENT)
        annotations[ORIGINAL_ANNOTATION] = json.dumps(original, sort_keys=True)
    spec["suspend"] = False
    pod_set = _pod_set(pod_sets)
    if pod_set is not None:
        spec["parallelism"] = pod_set.count
    inject_pod_set(
        template, pod_set, workload=workload, admission=admission, runtime_classes=runtime_classes
    )
    return out


def template_original(template: Mapping[str, Any]) -> dict[str, Any]:
    """What `inject_pod_set` changes of pod template `template`, as it is (for `restore`)."""
    original = {
        f"{part}.{field}": (template.get(part) or {}).get(field, _ABSENT)
        for part, field in _TEMPLATE_FIELDS
    }
    original[_RESOURCES] = resources_of(template.get("spec") or {})
    return original


def inject_pod_set(
    template: dict[str, Any],
    pod_set: PodSetStart | None,
    *,
    workload: str,
    admission: int,
    runtime_classes: RuntimeOverheads = NO_RUNTIME_CLASSES,
) -> None:
    """Change pod template `template` in place to make the admitted `pod_set`'s pods: its
    labels and annotations, muster's workload label and podset annotation, the flavors' node
    selector and tolerations, a routed podset's requests (`resize`: raises
    `resize.ResizeError` when the template cannot ask for exactly those)."""
    t_meta = template.setdefault("metadata", {})
    t_spec = template.setdefault("spec", {})
    labels = t_meta.setdefault("labels", {})
    if pod_set is not None:
        labels.update(pod_set.labels)
    labels[WORKLOAD_LABEL] = workload
    if admission:
        labels[ADMISSION_LABEL] = str(admission)
    if pod_set is None:
        return
    t_meta.setdefault("annotations", {}).update(
        {**pod_set.annotations, POD_SET_ANNOTATION: pod_set.name}
    )
    if pod_set.node_selector:
        t_spec["nodeSelector"] = {**(t_spec.get("nodeSelector") or {}), **pod_set.node_selector}
    tolerations = list(t_spec.get("tolerations") or [])
    for t in map(toleration_manifest, pod_set.tolerations):
        if t not in tolerations:
            tolerations.append(t)
    if tolerations:
        t_spec["tolerations"] = tolerations
    if not pod_set.routed:
        return  # its requests are the template's own
    rewritten = resized(t_spec, pod_set.requests, runtime_classes=runtime_classes)
    if rewritten is not None:
        template["spec"] = rewritten


def resources_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether the pod template's container resources differ between two versions of a Job."""
    return resources_of(_template_spec(before)) != resources_of(_template_spec(after))


def _template_spec(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((job.get("spec") or {}).get("template") or {}).get("spec") or {}


def suspended_job(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """`job` suspended, with its original parallelism; None when suspended already."""
    if is_suspended(job):
        return None
    out = copy.deepcopy(dict(job))
    out.setdefault("spec", {})["suspend"] = True
    original = saved_original(out)
    if original is not None and "parallelism" in original:
        _put(out["spec"], "parallelism", original["parallelism"])
    return out


def restored_job(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """A suspended `job` with the template start changed put back; None when nothing to do."""
    original = saved_original(job)
    if original is None or not is_suspended(job):
        return None
    out = copy.deepcopy(dict(job))
    _restore_template(out, original)
    return out


def as_written(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """`job` as its owner wrote it: what `started_job` changed (template fields, parallelism)
    put back, so the Workload derived from it is the one submitted before the start. `job`
    itself when muster never started it."""
    original = saved_original(job)
    if original is None:
        return job
    out = copy.deepcopy(dict(job))
    _restore_template(out, original)
    if "parallelism" in original:
        _put(out.setdefault("spec", {}), "parallelism", original["parallelism"])
    return out


def _restore_template(job: dict[str, Any], original: Mapping[str, Any]) -> None:
    """Put the saved template fields back into `job` and drop the saved copy."""
    restore_template(job.setdefault("spec", {}).setdefault("template", {}), original)
    del job["metadata"]["annotations"][ORIGINAL_ANNOTATION]


def restore_template(template: dict[str, Any], original: Mapping[str, Any]) -> None:
    """Put pod template `template` back, in place, as `template_original` saw it."""
    for part, field in _TEMPLATE_FIELDS:
        _put(template.setdefault(part, {}), field, original.get(f"{part}.{field}"))
    saved = original.get(_RESOURCES)
    if isinstance(saved, dict):  # absent in what a binder before routing on Kubernetes saved
        template["spec"] = with_resources(template["spec"], saved)
    if not template["metadata"]:
        del template["metadata"]


def saved_original(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a start saved of `job` (or JobSet) before changing it (its annotation), None if
    none."""
    text = (_meta(job).get("annotations") or {}).get(ORIGINAL_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _put(target: dict[str, Any], field: str, value: Any) -> None:
    if value is _ABSENT:
        target.pop(field, None)
    else:
        target[field] = value
