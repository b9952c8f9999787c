"""What an admission check controller is, and the shapes its pure part and the runner share.

A controller reconciles one Kueue Workload at a time, level-triggered as a Kubernetes
controller is: `reconcile(inputs)` looks at the Workload, its checks' configuration objects
and the objects the controller owns for it, as they are now, and returns a `Plan`: objects
to create and delete, its checks' new answers, Kubernetes Events to record, and when to look
again. Pure (no I/O, no clock: `now_s` comes in), so the same rules could run on a virtual
clock (`muster simulate` scripts check answers instead; docs/kubernetes.md says how a model
of a controller would plug in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import msgspec

from muster.api import check_states
from muster.api.resource import Resource

JsonObj = dict[str, Any]


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """A check's new entry: its state and message, and other fields of the entry (camelCase:
    podSetUpdates, requeueAfterSeconds; None removes one)."""

    state: str
    message: str = ""
    fields: Mapping[str, Any] = msgspec.field(default_factory=dict)


class Creation(msgspec.Struct, frozen=True, kw_only=True):
    """An object to create (an existing one of that name is taken as created); once it
    exists it becomes the controller owner of `adopts` (PodTemplate names, same namespace)."""

    resource: Resource
    manifest: JsonObj
    adopts: tuple[tuple[Resource, str], ...] = ()


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """A Kubernetes Event about the workload (Normal or Warning)."""

    type: str
    reason: str
    note: str


class Plan(msgspec.Struct, kw_only=True):
    answers: dict[str, Answer] = msgspec.field(default_factory=dict)  # check → changed entry
    create: list[Creation] = msgspec.field(default_factory=list)  # in order
    delete: list[tuple[Resource, str]] = msgspec.field(default_factory=list)  # (what, name)
    notes: list[Note] = msgspec.field(default_factory=list)
    recheck_after_s: float | None = None  # look again then even if nothing changes

    @property
    def empty(self) -> bool:
        return not (self.answers or self.create or self.delete or self.notes)


class Inputs(msgspec.Struct, frozen=True, kw_only=True):
    """What one reconcile reads: the Workload as stored, each of its checks this controller
    answers for with its configuration object (None: missing), the objects it owns for the
    workload, the ResourceFlavors by name, and the time."""

    workload: Mapping[str, Any]
    checks: Mapping[str, Mapping[str, Any] | None]
    owned: Sequence[Mapping[str, Any]]
    flavors: Mapping[str, Mapping[str, Any]]
    now_s: float


class CheckController(Protocol):
    """One controller: its name in AdmissionChecks' `spec.controllerName`, the kind of the
    configuration object its checks' `spec.parameters` name, what it creates per workload
    (owned by the Workload), and its rules."""

    controller_name: str
    config: Resource
    owned: Resource
    creates: tuple[Resource, ...]  # every kind a Plan may create (for RBAC and the runner)

    def reconcile(self, inputs: Inputs) -> Plan: ...


def condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    """Whether `obj`'s status has condition `type_` with status True."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == type_:
            return condition.get("status") == "True"
    return False


def condition_message(obj: Mapping[str, Any], type_: str) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == type_:
            return str(condition.get("message") or "")
    return ""


def checks_for(
    controller: CheckController,
    workload: Mapping[str, Any],
    admission_checks: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """The checks listed on `workload` whose AdmissionCheck names `controller`."""
    return [
        str(e["name"])
        for e in check_states.entries_of(workload.get("status"))
        if _spec(admission_checks.get(str(e["name"])) or {}).get("controllerName")
        == controller.controller_name
    ]


def config_of(controller: CheckController, check: Mapping[str, Any]) -> str | None:
    """The name of the configuration object an AdmissionCheck's `spec.parameters` names for
    `controller`, or None (none, or another kind)."""
    ref = _spec(check).get("parameters") or {}
    if (ref.get("apiGroup"), ref.get("kind")) != (controller.config.group, controller.config.kind):
        return None
    return str(ref["name"]) if ref.get("name") else None


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}
