"""Starting and stopping a Kueue-managed JobSet, as Kueue's JobSet integration does
(`RunWithPodSetsInfo`, `RestorePodSetsInfo`): pure functions from the JobSet as read to the
JobSet to write (None: nothing to write).

Start unsuspends the JobSet and injects into each replicatedJob's pod template what its
admitted podset (same name) carries, as a Job's start does (`jobs.inject_pod_set`): the
flavors' node selector and tolerations, muster's workload label and podset annotation. The
JobSet controller passes them on to the child Jobs it creates or resumes. What each template
was before is kept in annotation `muster.dev/pod-template-original` and put back on stop, in
the same write as the suspend (a suspended JobSet's templates may change).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from muster.api.jobset import workload_name_for_jobset
from muster.cluster.backend import PodSetStart, admission_of
from muster.cluster.kube.jobs import (
    ORIGINAL_ANNOTATION,
    inject_pod_set,
    is_suspended,
    restore_template,
    saved_original,
    template_original,
)
from muster.cluster.kube.resize import NO_RUNTIME_CLASSES, RuntimeOverheads


def workload_name(jobset: Mapping[str, Any]) -> str:
    """The Kueue Workload name of `jobset` (`jobset-<name>-<hash>`)."""
    meta = jobset.get("metadata") or {}
    return workload_name_for_jobset(str(meta.get("name", "")), str(meta.get("uid", "")))


def _templates(jobset: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(replicatedJob name, its pod template) for each replicatedJob, in spec order."""
    out = []
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if isinstance(rj, dict):
            job_spec = rj.setdefault("template", {}).setdefault("spec", {})
            out.append((str(rj.get("name", "")), job_spec.setdefault("template", {})))
    return out


def started_jobset(
    jobset: Mapping[str, Any],
    pod_sets: Sequence[PodSetStart],
    *,
    workload: str,
    admission: int = 0,
    runtime_classes: RuntimeOverheads = NO_RUNTIME_CLASSES,
) -> dict[str, Any] | None:
    """`jobset` unsuspended with each admitted podset's placement injected into the
    replicatedJob of its name; None when started. Raises `resize.ResizeError` when a routed
    template cannot ask for exactly the admitted requests (`jobs.started_job`)."""
    if not is_suspended(jobset):
        return None
    out = copy.deepcopy(dict(jobset))
    templates = _templates(out)
    annotations = out.setdefault("metadata", {}).setdefault("annotations", {})
    if ORIGINAL_ANNOTATION not in annotations:  # a retried start keeps the first original
        original = {name: template_original(t) for name, t in templates}
        annotations[ORIGINAL_ANNOTATION] = json.dumps(original, sort_keys=True)
    out["spec"]["suspend"] = False
    by_name = {ps.name: ps for ps in pod_sets}
    for name, template in templates:
        inject_pod_set(
            template,
            by_name.get(name),
            workload=workload,
            admission=admission,
            runtime_classes=runtime_classes,
        )
    return out


def suspended_jobset(jobset: Mapping[str, Any]) -> dict[str, Any] | None:
    """`jobset` suspended with its templates as their owner wrote them; None when suspended
    already and nothing is left to restore."""
    if is_suspended(jobset) and saved_original(jobset) is None:
        return None
    out = copy.deepcopy(dict(jobset))
    out.setdefault("spec", {})["suspend"] = True
    _restore(out)
    return out


def as_written(jobset: Mapping[str, Any]) -> Mapping[str, Any]:
    """`jobset` as its owner wrote it (what `started_jobset` changed put back), so the
    Workload derived from it is the one submitted before the start."""
    if saved_original(jobset) is None:
        return jobset
    out = copy.deepcopy(dict(jobset))
    _restore(out)
    return out


def admission_of_jobset(jobset: Mapping[str, Any]) -> int:
    """The admission sequence that started `jobset` (its templates' label; 0: none)."""
    if is_suspended(jobset):
        return 0
    return max((admission_of(t) for _, t in _templates(copy.deepcopy(dict(jobset)))), default=0)


def _restore(jobset: dict[str, Any]) -> None:
    original = saved_original(jobset)
    if original is None:
        return
    for name, template in _templates(jobset):
        saved = original.get(name)
        if isinstance(saved, dict):
            restore_template(template, saved)
    annotations = jobset["metadata"]["annotations"]
    del annotations[ORIGINAL_ANNOTATION]
    if not annotations:
        del jobset["metadata"]["annotations"]
