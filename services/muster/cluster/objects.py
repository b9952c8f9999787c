"""Nodes and pods: the parsed views gang-permit reads, and the `muster.dev/*` labels and
annotations that tie pods to workloads (wire shapes and keys defined in `muster.api`).

`node_view` and `pod_view` turn a stored v1 Node or Pod (JSON as a dict) into a `NodeView` or
`PodView` with quantities in milli-units; `check_node` and `check_pod` list what is wrong with
a manifest, one line per problem with its field path, so `apply` can refuse it up front.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import msgspec

from muster.api.errors import ObjectErrors
from muster.api.model import Taint, Toleration
from muster.api.podspec import pod_requests, taints, tolerations
from muster.api.raw import (  # the wire shapes live in muster.api; re-exported for callers here
    PodPhase,
    RawNode,
    RawNodeSpec,
    RawNodeStatus,
    RawPod,
    RawPodFullSpec,
    RawPodStatus,
    RawStatusCondition,
    Wire,
)
from muster.api.times import format_time, parse_time, run_seconds_of
from muster.api.wellknown import (
    DEFAULT_SCHEDULER,
    POD_GROUP_LABEL,
    POD_SET_ANNOTATION,
    RUN_SECONDS_ANNOTATION,
    SCHEDULER_NAME,
    WORKLOAD_LABEL,
)
from muster.api.wording import structural

# On a pod muster created for an admitted workload: the stream sequence of that `admitted`. An
# eviction stops only the pods of admissions stored before it (docs/events.md, "Fencing").
ADMISSION_LABEL = "muster.dev/admission"
DEFAULT_MAX_PODS = "110"  # the kubelet's default --max-pods, for a node without allocatable.pods

_W = TypeVar("_W", bound=Wire)
RawCondition = RawStatusCondition

__all__ = [
    "ADMISSION_LABEL",
    "DEFAULT_MAX_PODS",
    "DEFAULT_SCHEDULER",
    "POD_SET_ANNOTATION",
    "RUN_SECONDS_ANNOTATION",
    "SCHEDULER_NAME",
    "WORKLOAD_LABEL",
    "NodeView",
    "PodPhase",
    "PodView",
    "RawCondition",
    "RawNode",
    "RawNodeSpec",
    "RawNodeStatus",
    "RawPod",
    "RawPodFullSpec",
    "RawPodStatus",
    "admission_of",
    "check_node",
    "check_pod",
    "format_time",
    "node_view",
    "parse_time",
    "pod_view",
    "report_key",
    "run_seconds_of",
    "structural_problem",
]


# --- views -----------------------------------------------------------------------------------


class NodeView(msgspec.Struct, frozen=True, kw_only=True):
    """A node as gang-permit places pods on it; `allocatable` in milli-units per resource."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    ready: bool  # condition Ready is "True"
    allocatable: Mapping[str, int]


class PodView(msgspec.Struct, frozen=True, kw_only=True):
    """A pod as gang-permit and the watcher read it; `requests` per pod, in milli-units."""

    namespace: str
    name: str
    uid: str
    workload: str  # label muster.dev/workload ("" for a pod muster did not start)
    pod_set: str  # annotation muster.dev/pod-set ("" when absent)
    node_name: str  # "" while unbound
    phase: PodPhase
    requests: Mapping[str, int]
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    scheduler_name: str
    run_seconds: float | None  # annotation muster.dev/run-seconds; None: runs until deleted
    group: str = ""  # `report_key`: what events about the pod's life name ("" for none)
    ready: bool = False  # its Ready condition is True (Kueue's readiness, not the phase)
    admission: int = 0  # `admission_of`: the admission muster's binder started it for (0: none)

    @property
    def workload_key(self) -> str:
        """Return "<namespace>/<workload>", or "" for a pod of no workload."""
        return f"{self.namespace}/{self.workload}" if self.workload else ""


def node_view(obj: Mapping[str, Any]) -> NodeView:
    """Return the view of a stored v1 Node (one `check_node` accepts)."""
    raw = msgspec.convert(obj, RawNode)
    errs = ObjectErrors(f"Node/{raw.metadata.name}")
    allocatable = errs.quantities(raw.status.allocatable or raw.status.capacity, "")
    return NodeView(
        name=raw.metadata.name,
        labels=raw.metadata.labels,
        taints=taints(raw.spec.taints),
        unschedulable=raw.spec.unschedulable,
        ready=any(c.type == "Ready" and c.status == "True" for c in raw.status.conditions),
        allocatable=allocatable,
    )


def is_ready(status: Mapping[str, Any]) -> bool:
    """Whether a pod's `status` (as stored) has its Ready condition True."""
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def pod_view(obj: Mapping[str, Any]) -> PodView:
    """Return the view of a stored v1 Pod (one `check_pod` accepts)."""
    raw = msgspec.convert(obj, RawPod)
    meta = raw.metadata
    errs = ObjectErrors(f"Pod/{meta.namespace}/{meta.name}")
    return PodView(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        workload=meta.labels.get(WORKLOAD_LABEL, ""),
        pod_set=meta.annotations.get(POD_SET_ANNOTATION, ""),
        node_name=raw.spec.node_name,
        phase=raw.status.phase,
        requests=pod_requests(raw.spec, errs, path="spec"),
        node_selector=raw.spec.node_selector,
        tolerations=tolerations(raw.spec.tolerations),
        scheduler_name=raw.spec.scheduler_name,
        run_seconds=run_seconds_of(meta.annotations),
        ready=any(c.type == "Ready" and c.status == "True" for c in raw.status.conditions),
        admission=admission_of(obj),
        group=report_key(
            meta.namespace,
            meta.labels,
            None
            if raw.spec.workload_ref is None
            else (
                raw.spec.workload_ref.name,
                raw.spec.workload_ref.pod_group,
                raw.spec.workload_ref.pod_group_replica_key,
            ),
            scheduling_group=(
                raw.spec.scheduling_group.pod_group_name if raw.spec.scheduling_group else ""
            ),
        ),
    )


def admission_of(obj: Mapping[str, Any]) -> int:
    """The admission sequence a pod's `muster.dev/admission` label names (0: none, or not a
    number: a pod from before admissions were named counts as the oldest)."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(ADMISSION_LABEL) if isinstance(labels, Mapping) else None
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else 0


def report_key(
    namespace: str,
    labels: Mapping[str, str],
    workload_ref: tuple[str, str, str] | None,
    *,
    scheduling_group: str = "",
) -> str:
    """The `workload` key of events about a pod's life (docs/events.md), "" for none.

    The pod's gang source, in gang placement's order: its Workload API pod group
    "<ns>/<workload>/<podGroup>", plus "/<replicaKey>" when it names one (`workload_ref` =
    name, podGroup, replica key), its PodGroup "<ns>/<name>" (label
    scheduling.x-k8s.io/pod-group), its Kueue workload "<ns>/<name>" (label
    muster.dev/workload), or its scheduling.k8s.io PodGroup "<ns>/<name>"
    (spec.schedulingGroup).
    """
    if workload_ref is not None:
        name, group, replica = workload_ref
        return "/".join((namespace, name, group, *([replica] if replica else [])))
    source = labels.get(POD_GROUP_LABEL) or labels.get(WORKLOAD_LABEL) or scheduling_group
    return f"{namespace}/{source}" if source else ""


# --- checks ----------------------------------------------------------------------------------


def check_node(obj: Mapping[str, Any]) -> Iterator[str]:
    """Yield one "<field path>: <problem>" line per problem that would make `node_view` fail."""
    raw, problem = _decoded(obj, RawNode)
    if raw is None:
        yield problem
        return
    errs = ObjectErrors("")
    errs.quantities(raw.status.capacity, "status.capacity")
    errs.quantities(raw.status.allocatable, "status.allocatable")
    yield from (f"{e.path}: {e.problem}" for e in errs.errors)


def check_pod(obj: Mapping[str, Any]) -> Iterator[str]:
    """Yield one "<field path>: <problem>" line per problem that would make `pod_view` fail."""
    raw, problem = _decoded(obj, RawPod)
    if raw is None:
        yield problem
        return
    errs = ObjectErrors("")
    pod_requests(raw.spec, errs, path="spec")
    yield from (f"{e.path}: {e.problem}" for e in errs.errors)
    text = raw.metadata.annotations.get(RUN_SECONDS_ANNOTATION)
    if text is not None and run_seconds_of(raw.metadata.annotations) is None:
        yield (
            f'metadata.annotations["{RUN_SECONDS_ANNOTATION}"]: '
            f"must be a finite number of seconds >= 0, got {text!r}"
        )


def _decoded(obj: Mapping[str, Any], kind: type[_W]) -> tuple[_W | None, str]:
    """Return `obj` as a wire struct, or None and msgspec's first structural problem."""
    try:
        return msgspec.convert(obj, kind), ""
    except msgspec.ValidationError as exc:
        return None, structural_problem(exc)


def structural_problem(exc: msgspec.ValidationError) -> str:
    """Return msgspec's message as "<field path>: <problem>" (paths as written in YAML), in
    plain words."""
    where = structural(str(exc))
    return f"{where.path or '(object)'}: {where.problem}"
