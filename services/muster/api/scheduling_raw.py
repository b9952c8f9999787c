"""Wire structs of today's Kubernetes gang API, `scheduling.k8s.io` as written in YAML:

- v1alpha2 (Kubernetes v1.36): Workload (pod group templates) and PodGroup, the PodGroup naming
  its template through `podGroupTemplateRef.workload`, `disruptionMode` a string;
- v1beta1 and v1alpha3 (v1.37): Workload (pod group or composite templates), PodGroup
  (`workloadRef`, `disruptionMode` a union, `parentCompositePodGroupName`) and, in v1alpha3
  only, CompositePodGroup.

The v1alpha1 Workload (v1.35) is `muster.api.raw.RawSchedulingWorkload`. Conversion is in
`muster.api.scheduling_objects`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from muster.api.raw import (
    Document,
    RawDisruptionMode,
    RawSchedulingConstraints,
    RawSchedulingPolicy,
    RawStatusCondition,
    RawTypedLocalObjectReference,
    Wire,
)


class RawGroupStatus(Wire):
    conditions: list[RawStatusCondition] = msgspec.field(default_factory=list)
    resource_claim_statuses: list[dict[str, Any]] = msgspec.field(default_factory=list)


# --- v1alpha2 (v1.36) -------------------------------------------------------------------------


class RawV1Alpha2Policy(Wire):
    """What a v1.36 PodGroup and its template both say about scheduling their pods."""

    scheduling_policy: RawSchedulingPolicy | None = None
    scheduling_constraints: RawSchedulingConstraints | None = None
    resource_claims: list[dict[str, Any]] = msgspec.field(default_factory=list)
    disruption_mode: str | None = None  # "Pod" | "PodGroup"
    priority_class_name: str = ""
    priority: int | None = None


class RawPodGroupTemplateV1Alpha2(RawV1Alpha2Policy):
    name: str = ""


class RawWorkloadSpecV1Alpha2(Wire):
    controller_ref: RawTypedLocalObjectReference | None = None
    pod_group_templates: list[RawPodGroupTemplateV1Alpha2] = msgspec.field(default_factory=list)


class RawWorkloadV1Alpha2(Document):
    spec: RawWorkloadSpecV1Alpha2 = msgspec.field(default_factory=RawWorkloadSpecV1Alpha2)


class RawTemplateWorkloadRef(Wire):
    workload_name: str = ""
    pod_group_template_name: str = ""


class RawPodGroupTemplateRef(Wire):
    workload: RawTemplateWorkloadRef | None = None


class RawPodGroupSpecV1Alpha2(RawV1Alpha2Policy):
    pod_group_template_ref: RawPodGroupTemplateRef | None = None


class RawPodGroupV1Alpha2(Document):
    spec: RawPodGroupSpecV1Alpha2 = msgspec.field(default_factory=RawPodGroupSpecV1Alpha2)
    status: RawGroupStatus = msgspec.field(default_factory=RawGroupStatus)


# --- v1beta1 and v1alpha3 (v1.37) -------------------------------------------------------------


class RawGroupPolicy(Wire):
    """What a v1.37 PodGroup, CompositePodGroup and their templates all say about scheduling
    their members."""

    scheduling_policy: RawSchedulingPolicy | None = None
    scheduling_constraints: RawSchedulingConstraints | None = None
    resource_claims: list[dict[str, Any]] = msgspec.field(default_factory=list)
    disruption_mode: RawDisruptionMode | None = None
    priority_class_name: str = ""
    priority: int | None = None
    preemption_policy: str = ""


class RawGroupTemplate(RawGroupPolicy):
    """A PodGroupTemplate, or (with `pod_group_templates` / `composite_pod_group_templates`) a
    CompositePodGroupTemplate: which one is known from the list it is in."""

    name: str = ""
    pod_group_templates: list[RawGroupTemplate] = msgspec.field(default_factory=list)
    composite_pod_group_templates: list[RawGroupTemplate] = msgspec.field(default_factory=list)


class RawWorkloadSpec(Wire):
    controller_ref: RawTypedLocalObjectReference | None = None
    pod_group_templates: list[RawGroupTemplate] = msgspec.field(default_factory=list)
    composite_pod_group_templates: list[RawGroupTemplate] = msgspec.field(default_factory=list)


class RawGroupWorkload(Document):
    """A v1beta1 or v1alpha3 Workload."""

    spec: RawWorkloadSpec = msgspec.field(default_factory=RawWorkloadSpec)


class RawWorkloadReference(Wire):
    workload_name: str = ""
    template_name: str = ""


class RawGroupSpec(RawGroupPolicy):
    """The spec of a v1beta1/v1alpha3 PodGroup or a v1alpha3 CompositePodGroup."""

    workload_ref: RawWorkloadReference | None = None
    parent_composite_pod_group_name: str = ""


class RawGroup(Document):
    """A v1beta1/v1alpha3 PodGroup or a v1alpha3 CompositePodGroup."""

    spec: RawGroupSpec = msgspec.field(default_factory=RawGroupSpec)
    status: RawGroupStatus = msgspec.field(default_factory=RawGroupStatus)
