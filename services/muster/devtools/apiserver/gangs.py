"""The scheduling.k8s.io gang API as kube-apiserver validates it (Kubernetes v1.36's v1alpha2,
v1.37's v1beta1 and v1alpha3; v1.35's v1alpha1 Workload is served without these rules).

- PodGroup: `schedulingPolicy` is exactly one of `basic` and `gang` (`minCount` >= 1), at most one
  topology key, `disruptionMode` one of `single`/`all` (v1alpha2: `Pod`/`PodGroup`, default
  `Pod`), a parent CompositePodGroup only with a `workloadRef`; `spec.priority` filled from the
  PriorityClass on create. The spec is immutable but for `schedulingPolicy.gang.minCount`
  (v1beta1 and v1alpha3; nothing in v1alpha2). Status is a subresource.
- CompositePodGroup (v1alpha3): the same with `minGroupCount`, a required `workloadRef`, and an
  immutable spec.
- Workload: exactly one of `podGroupTemplates` and `compositePodGroupTemplates` (at most 8
  each); templates are neither added nor removed, and only a pod group template's
  `gang.minCount` may change (v1alpha2: nothing).
"""

from __future__ import annotations

import copy
from typing import Any

from muster.devtools.apiserver.errors import (
    Cause,
    bad_value,
    forbidden,
    immutable,
    required,
    unsupported,
)
from muster.devtools.apiserver.objects import JsonObj
from muster.devtools.apiserver.strategy_base import Context, Strategy

GROUP = "scheduling.k8s.io"
MAX_TEMPLATES = 8
V1ALPHA2_DISRUPTION = ("Pod", "PodGroup")


def _version(obj: JsonObj) -> str:
    api_version = obj.get("apiVersion")
    return api_version.rpartition("/")[2] if isinstance(api_version, str) else ""


def _policy_causes(policy: Any, path: str, count: str) -> list[Cause]:
    if not isinstance(policy, dict):
        return [required(path)]
    if ("basic" in policy) == ("gang" in policy):
        return [bad_value(path, policy, "exactly one of basic or gang must be set")]
    gang = policy.get("gang")
    if gang is None:
        return []
    value = gang.get(count) if isinstance(gang, dict) else None
    if not isinstance(value, int) or isinstance(value, bool):
        return [required(f"{path}.gang.{count}")]
    if value < 1:
        return [bad_value(f"{path}.gang.{count}", value, "must be greater than or equal to 1")]
    return []


def _constraint_causes(spec: JsonObj, path: str) -> list[Cause]:
    topology = (spec.get("schedulingConstraints") or {}).get("topology") or []
    if not isinstance(topology, list):
        return [bad_value(f"{path}.schedulingConstraints.topology", topology, "must be a list")]
    causes = []
    if len(topology) > 1:
        causes.append(
            bad_value(
                f"{path}.schedulingConstraints.topology", len(topology), "must have at most 1 item"
            )
        )
    for i, entry in enumerate(topology):
        if not isinstance(entry, dict) or not entry.get("key"):
            causes.append(required(f"{path}.schedulingConstraints.topology[{i}].key"))
    return causes


def _disruption_causes(spec: JsonObj, path: str, version: str) -> list[Cause]:
    mode = spec.get("disruptionMode")
    if mode is None:
        return []
    if version == "v1alpha2":
        if mode not in V1ALPHA2_DISRUPTION:
            return [unsupported(f"{path}.disruptionMode", mode, list(V1ALPHA2_DISRUPTION))]
        return []
    if not isinstance(mode, dict) or ("single" in mode) == ("all" in mode):
        return [bad_value(f"{path}.disruptionMode", mode, "exactly one of single or all")]
    return []


def _without_min(spec: Any, count: str) -> Any:
    """`spec` with its gang's count taken out: what may not change."""
    found = copy.deepcopy(spec) if isinstance(spec, dict) else spec
    gang = (found.get("schedulingPolicy") or {}).get("gang") if isinstance(found, dict) else None
    if isinstance(gang, dict):
        gang.pop(count, None)
    return found


def _resolve_priority(spec: JsonObj, ctx: Context) -> None:
    """Priority admission: spec.priority from the PriorityClass (else the global default)."""
    if "priority" in spec:
        return
    name = spec.get("priorityClassName")
    pc = ctx.priority_class(name) if name else ctx.global_default_priority_class()
    spec["priority"] = int(pc.get("value", 0)) if pc else 0


class _Group(Strategy):
    """A PodGroup or CompositePodGroup."""

    count = "minCount"

    def defaults(self, obj: JsonObj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict) and "disruptionMode" not in spec:
            version = _version(obj)
            spec["disruptionMode"] = "Pod" if version == "v1alpha2" else {"single": {}}

    def prepare_create(self, obj: JsonObj, ctx: Context) -> None:
        obj.pop("status", None)
        _resolve_priority(obj["spec"], ctx)

    def causes(self, obj: JsonObj) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [required("spec")]
        version = _version(obj)
        causes = [
            *_policy_causes(spec.get("schedulingPolicy"), "spec.schedulingPolicy", self.count),
            *_constraint_causes(spec, "spec"),
            *_disruption_causes(spec, "spec", version),
        ]
        if spec.get("parentCompositePodGroupName") and not spec.get("workloadRef"):
            causes.append(required("spec.workloadRef", "required with a parent"))
        policy = spec.get("preemptionPolicy")
        if policy is not None and policy not in ("Never", "PreemptLowerPriority"):
            causes.append(
                unsupported("spec.preemptionPolicy", policy, ["Never", "PreemptLowerPriority"])
            )
        return causes

    def update_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        new_spec, old_spec = new.get("spec"), old.get("spec")
        mutable = self.count == "minCount" and _version(new) != "v1alpha2"
        if mutable:
            new_spec = _without_min(new_spec, self.count)
            old_spec = _without_min(old_spec, self.count)
        if new_spec == old_spec:
            return []
        what = "except schedulingPolicy.gang.minCount" if mutable else ""
        return [forbidden("spec", f"field is immutable {what}".rstrip())]


class PodGroupStrategy(_Group):
    pass


class CompositePodGroupStrategy(_Group):
    count = "minGroupCount"

    def causes(self, obj: JsonObj) -> list[Cause]:
        causes = super().causes(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict) and not spec.get("workloadRef"):
            causes.append(required("spec.workloadRef"))
        return causes


class WorkloadStrategy(Strategy):
    """v1alpha2 and later (a v1alpha1 Workload is kept as written)."""

    def causes(self, obj: JsonObj) -> list[Cause]:
        if _version(obj) == "v1alpha1":
            return []
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [required("spec")]
        plain = spec.get("podGroupTemplates") or []
        composite = spec.get("compositePodGroupTemplates") or []
        causes = []
        if bool(plain) == bool(composite):
            causes.append(
                bad_value(
                    "spec",
                    "",
                    "exactly one of podGroupTemplates or compositePodGroupTemplates must be set",
                )
            )
        for field, templates in (
            ("podGroupTemplates", plain),
            ("compositePodGroupTemplates", composite),
        ):
            if len(templates) > MAX_TEMPLATES:
                causes.append(
                    bad_value(f"spec.{field}", len(templates), f"must have at most {MAX_TEMPLATES}")
                )
        for i, template in enumerate(plain):
            at = f"spec.podGroupTemplates[{i}]"
            if not isinstance(template, dict) or not template.get("name"):
                causes.append(required(f"{at}.name"))
                continue
            causes += _policy_causes(
                template.get("schedulingPolicy"), f"{at}.schedulingPolicy", "minCount"
            )
        return causes

    def update_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        if _version(old) == "v1alpha1":
            return []
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        if _version(new) != "v1alpha2":
            new_spec, old_spec = _templates_without_min(new_spec), _templates_without_min(old_spec)
        if new_spec == old_spec:
            return []
        return [immutable("spec", "templates may not be added, removed or changed")]


def _templates_without_min(spec: JsonObj) -> JsonObj:
    found = copy.deepcopy(spec)
    for template in found.get("podGroupTemplates") or []:
        gang = (
            (template.get("schedulingPolicy") or {}).get("gang")
            if isinstance(template, dict)
            else None
        )
        if isinstance(gang, dict):
            gang.pop("minCount", None)
    return found


GANG_STRATEGIES: dict[tuple[str, str], Strategy] = {
    (GROUP, "podgroups"): PodGroupStrategy(),
    (GROUP, "compositepodgroups"): CompositePodGroupStrategy(),
    (GROUP, "workloads"): WorkloadStrategy(),
}
