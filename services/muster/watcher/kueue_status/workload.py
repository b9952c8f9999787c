"""What the statuses need of one Kueue workload (`WorkloadRecord`) and its status as Kueue
shows it; its reclaimable pods as read from events; its key as an `ObjectRef`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from muster.api.check_states import AnsweredCheck, ChecksWanted
from muster.api.check_states import format_time as format_metav1_time
from muster.api.model import PodSet, PodSetAssignment
from muster.cluster.kube.resources import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.core.conditions import (
    Said,
)
from muster.core.reclaim import NONE, reclaimed_usage, requested_usage
from muster.watcher.kueue_status.fields import FlavorResource, kueue_condition, milli_of

# Conditions in the order `kubectl describe` lists them.
_CONDITION_ORDER = ("QuotaReserved", "Admitted", "PodsReady", "Evicted", "Requeued", "Finished")

# "inactive": deactivated (a check Rejected it, ...), it reserves nothing and waits for nothing.
State = Literal["pending", "reserving", "admitted", "finished", "inactive"]


class WorkloadRecord:
    """What the statuses need of one Kueue workload."""

    __slots__ = (
        "admission",
        "answers",
        "assigned",
        "checks",
        "cluster_name",
        "conditions",
        "evicted_at_s",
        "local_queue",
        "pod_sets",
        "reclaimable",
        "reclaimed",
        "requeue_at_s",
        "requeue_count",
        "retry_at_s",
        "retry_ends",
        "state",
        "usage",
    )

    def __init__(self, local_queue: tuple[str, str]) -> None:
        self.local_queue = local_queue  # (namespace, name)
        self.state: State = "pending"
        self.conditions: dict[str, dict[str, str]] = {}
        self.admission: dict[str, Any] | None = None
        self.usage: Counter[FlavorResource] = Counter()  # of the admission, per flavor
        self.assigned: tuple[PodSetAssignment, ...] = ()  # the admission, per podset
        # Its podsets' counts as submitted, and its reclaimable pods as last told (podset ->
        # count): what its run in its LocalQueue's fair sharing usage holds (`held`).
        self.pod_sets: tuple[PodSet, ...] = ()
        self.reclaimed: Mapping[str, int] = NONE
        self.checks: tuple[str, ...] | None = None  # None: no reservation ever required one
        self.evicted_at_s = 0.0  # when last evicted (event time)
        self.answers: dict[str, AnsweredCheck] = {}  # of checks admission answers (MultiKueue)
        self.cluster_name = ""  # the worker MultiKueue dispatched it to, until evicted
        # status.requeueState: PodsReadyTimeout evictions since it was last deactivated, and
        # from its eviction until it queues again, when it may (as admission counts and waits:
        # core/lifecycle.py); `retry_at_s`, a check's Retry's end, until its eviction.
        self.requeue_count = 0
        self.requeue_at_s: float | None = None
        self.retry_at_s: float | None = None
        # Of its checks told Retry since its last eviction without quota to decide on, when
        # each asks it to queue again: requeueAt once reactivated (the engine's `retry_ends`).
        self.retry_ends: dict[str, float] = {}
        # status.reclaimablePods, of a Job's or JobSet's Workload only (None): a bare
        # Workload's is its owner's to write, and admission reads it from there.
        self.reclaimable: list[dict[str, Any]] | None = None

    def checks_wanted(self) -> ChecksWanted | None:
        if self.checks is None:
            return None
        answers = tuple(self.answers[name] for name in sorted(self.answers))
        return ChecksWanted(names=self.checks, evicted_at_s=self.evicted_at_s, answers=answers)

    def set(self, type_: str, status: bool, reason: str, message: str) -> None:
        self.conditions[type_] = kueue_condition(type_, status, reason, message)

    def say(self, conditions: Iterable[Said]) -> None:
        for said in conditions:
            self.set(*said)

    def admit(self, admission: pb.Admission) -> None:
        assignments = []
        assigned = []
        self.usage = Counter()
        for ps in admission.pod_set_assignments:
            flavors = dict(sorted(ps.flavors.items()))
            assignment: dict[str, Any] = {"name": ps.name, "flavors": flavors}
            if ps.resource_usage:
                assignment["resourceUsage"] = dict(sorted(ps.resource_usage.items()))
            assignment["count"] = ps.count
            assignments.append(assignment)
            usage = {resource: milli_of(text) for resource, text in ps.resource_usage.items()}
            for resource, milli in usage.items():
                self.usage[(ps.flavors.get(resource, ""), resource)] += milli
            assigned.append(
                PodSetAssignment(
                    name=ps.name, flavors=flavors, count=ps.count, resource_usage=usage
                )
            )
        self.assigned = tuple(assigned)
        self.admission = {
            "clusterQueue": admission.cluster_queue,
            "podSetAssignments": assignments,
        }

    def unadmit(self) -> None:
        self.admission = None
        self.usage = Counter()
        self.assigned = ()

    def held(self, *, reclaimable: bool) -> Mapping[FlavorResource, int]:
        """What its admission holds less its reclaimable pods (with Kueue's gate
        ReclaimablePods on), as admission's run of it holds (`core.reclaim`)."""
        if not reclaimable or not self.reclaimed:
            return self.usage
        return reclaimed_usage(self.assigned, self.pod_sets, self.reclaimed)

    def requested(self, *, reclaimable: bool) -> Mapping[FlavorResource, int]:
        """What it asks for in full in its admission's flavors (its pods less its reclaimable
        ones, with the gate), however few a partial admission gave it: what its entry penalty
        is priced on, as admission prices it (`core.reclaim.requested_usage`)."""
        reclaimed = self.reclaimed if reclaimable else NONE
        return requested_usage(self.assigned, self.pod_sets, reclaimed)

    def status(self) -> dict[str, Any]:
        conditions = [self.conditions[t] for t in _CONDITION_ORDER if t in self.conditions]
        out: dict[str, Any] = {"conditions": conditions}
        if self.admission is not None:
            out["admission"] = self.admission
        if self.cluster_name:
            out["clusterName"] = self.cluster_name
        if self.requeue_count or self.requeue_at_s is not None:
            # Kueue's metav1.Time: whole seconds, the instant admission waits for. requeueAt
            # None once it queues again: the writer's merge patch removes it (and requeueState
            # with it when no count is left: a check's Retry counts nothing).
            at = None if self.requeue_at_s is None else format_metav1_time(self.requeue_at_s)
            state: dict[str, Any] = {"requeueAt": at}
            if self.requeue_count:
                state["count"] = self.requeue_count
            out["requeueState"] = state
        if self.reclaimable:  # none: the writer's merge patch removes a list it wrote before
            out["reclaimablePods"] = self.reclaimable
        return out


def reclaimable_list(pods: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """Kueue's `[{name: podset, count}]`, of the podsets with pods to reclaim, sorted."""
    return [{"name": name, "count": count} for name, count in sorted(pods) if count > 0]


def reclaimed_of(pods: list[dict[str, Any]]) -> Mapping[str, int]:
    """podset -> its reclaimable pods, of a `reclaimable_list` (the shared empty map)."""
    return {str(p["name"]): int(p["count"]) for p in pods} or NONE


def manifest_reclaimable(manifest_json: str) -> list[dict[str, Any]]:
    """The reclaimablePods a Job's Workload was submitted with (its finished pods when the
    watcher first saw it); none when the manifest says nothing readable of them."""
    if '"reclaimablePods"' not in manifest_json:  # the usual case, without a parse
        return []
    try:
        status = json.loads(manifest_json).get("status")
        pods = [(str(p["name"]), int(p["count"])) for p in status["reclaimablePods"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []  # the watcher wrote it from a Job it validated; never seen
    return reclaimable_list(pods)


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def workload_ref(key: str) -> ObjectRef:
    namespace, name = split_key(key)
    return ObjectRef(kind="Workload", namespace=namespace, name=name)
