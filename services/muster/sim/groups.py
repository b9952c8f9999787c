"""The scheduling.k8s.io PodGroups and CompositePodGroups of a simulated cluster, and the
conditions a scheduler writes on PodGroups, for the report (`podGroups` in the JSON).

Conditions as kube-scheduler writes them (Kubernetes v1.37; v1.36's name for the first):
- `PodGroupInitiallyScheduled` (v1alpha2: `PodGroupScheduled`): "False" with reason
  `Unschedulable` and why while the group waits; "True" with reason `Scheduled` once it has been
  placed, and then never again "False";
- `DisruptionTarget`: "True" with reason `PreemptionByScheduler` once the group (or a tree it is
  in) was evicted whole to place another.
CompositePodGroups get no conditions: kube-scheduler v1.37 writes none on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from muster.api.model import CompositePodGroup, Condition, SchedulingPodGroup

INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
SCHEDULED_V1ALPHA2 = "PodGroupScheduled"  # Kubernetes v1.36's name of the same condition
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"

GroupObject = SchedulingPodGroup | CompositePodGroup


@dataclass(slots=True)
class _Group:
    obj: GroupObject
    conditions: dict[str, Condition] = field(default_factory=dict)


class GroupBook:
    """Every PodGroup and CompositePodGroup that arrived, keyed "<namespace>/<name>"."""

    def __init__(self) -> None:
        self.pod_groups: dict[str, SchedulingPodGroup] = {}
        self.composites: dict[str, CompositePodGroup] = {}
        self._groups: dict[tuple[str, str], _Group] = {}  # (kind, key)

    def arrived(self, obj: GroupObject) -> None:
        if isinstance(obj, SchedulingPodGroup):
            self.pod_groups[obj.key] = obj
        else:
            self.composites[obj.key] = obj
        known = {c.type: c for c in obj.conditions}
        self._groups[(type(obj).__name__, obj.key)] = _Group(obj, known)

    def waiting(self, gang: str, message: str) -> None:
        """The PodGroup `gang` waits: unschedulable, unless it has been scheduled before."""
        found = self._pod_group(gang)
        if found is None:
            return
        kind = _scheduled_type(found.obj)
        current = found.conditions.get(kind)
        if current is not None and current.status == "True":
            return  # PodGroupInitiallyScheduled never reverts
        found.conditions[kind] = Condition(
            type=kind, status="False", reason="Unschedulable", message=message
        )

    def scheduled(self, gang: str, message: str) -> None:
        found = self._pod_group(gang)
        if found is None:
            return
        kind = _scheduled_type(found.obj)
        current = found.conditions.get(kind)
        if current is None or current.status != "True":
            found.conditions[kind] = Condition(
                type=kind, status="True", reason="Scheduled", message=message
            )

    def disrupted(self, gang: str, message: str) -> None:
        found = self._pod_group(gang)
        if found is not None:
            found.conditions[DISRUPTION_TARGET] = Condition(
                type=DISRUPTION_TARGET,
                status="True",
                reason=PREEMPTION_BY_SCHEDULER,
                message=message,
            )

    def _pod_group(self, key: str) -> _Group | None:
        return self._groups.get((SchedulingPodGroup.__name__, key))

    def states(self) -> tuple[GroupObject, ...]:
        """Every group as it ends, its conditions as written here, by kind then key."""
        return tuple(
            msgspec.structs.replace(group.obj, conditions=tuple(group.conditions.values()))
            for _, group in sorted(self._groups.items())
        )


def _scheduled_type(group: GroupObject) -> str:
    return SCHEDULED_V1ALPHA2 if group.api_version.endswith("/v1alpha2") else INITIALLY_SCHEDULED


def group_entry(group: GroupObject) -> dict[str, Any]:
    """A scheduling.k8s.io PodGroup or CompositePodGroup as written (its apiVersion), its
    spec in the fields placement reads, and the conditions the scheduler wrote on it."""
    meta = group.meta
    metadata: dict[str, Any] = {"namespace": meta.namespace, "name": meta.name}
    if meta.annotations:
        metadata["annotations"] = dict(meta.annotations)
    policy = group.policy
    count = "minGroupCount" if isinstance(group, CompositePodGroup) else "minCount"
    spec: dict[str, Any] = {
        "schedulingPolicy": (
            {"gang": {count: policy.min_count}} if policy.min_count is not None else {"basic": {}}
        )
    }
    if group.workload_name:
        spec["workloadRef"] = {
            "workloadName": group.workload_name,
            "templateName": group.template_name,
        }
    if group.parent:
        spec["parentCompositePodGroupName"] = group.parent
    if policy.topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": policy.topology_key}]}
    spec["disruptionMode"] = {policy.disruption: {}}
    if policy.priority is not None:
        spec["priority"] = policy.priority
    if policy.priority_class_name:
        spec["priorityClassName"] = policy.priority_class_name
    entry: dict[str, Any] = {
        "apiVersion": group.api_version,
        "kind": "CompositePodGroup" if isinstance(group, CompositePodGroup) else "PodGroup",
        "metadata": metadata,
        "spec": spec,
    }
    if group.conditions:
        entry["status"] = {
            "conditions": [
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                for c in group.conditions
            ]
        }
    return entry
