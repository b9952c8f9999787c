"""Admission check controllers on the virtual clock: a model beside `sim/fleet.py`.

A check whose AdmissionCheck names a controller in `muster.checks.registry` is answered by
that controller's own pure `reconcile` (the rules the watcher runs on Kubernetes), not by a
script. The model plays the parts around it:
- the API server: per workload, its `status.admissionChecks` entries (reset after an eviction
  as Kueue resets them, a Retry counted) and the objects each `Plan` creates or deletes;
- the cluster-autoscaler: `muster.dev/provisioning` on a ProvisioningRequestConfig says which
  condition each request made for it gets, that many seconds after it was created (none: the
  request is never answered).
`Plan.answers` become `SetCheck` entries on the timeline (so `set_admission_check`), and
`recheck_after_s` and each scripted condition a `RunChecks` entry that reconciles again; the
answers' messages go to the report. Kubernetes Events (`Plan.notes`) are not kept, and the
PodTemplates a controller makes carry no flavor labels: nothing here reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from muster.api import check_states
from muster.api.encode import workload_to_kueue
from muster.api.model import Admission, AdmissionCheck, ResourceFlavor, Workload, WorkloadKey
from muster.api.pod_set_updates import PodSetUpdate, ready_updates, start_conflict
from muster.checks.framework import CheckController, Inputs, Plan, config_of
from muster.checks.provisioning import PROVISIONING_REQUESTS
from muster.checks.provisioning.objects import attempt_of, name_of
from muster.checks.registry import by_controller_name
from muster.core.placement.admitted import gang_of_admitted
from muster.sim.annotations import ProvisioningScript
from muster.sim.scenario import Scenario
from muster.sim.timeline import Action, RunChecks, SetCheck

JsonObj = dict[str, Any]
_MESSAGES = {"Failed": "the cluster-autoscaler could not provision the capacity (scripted)"}


class ChecksHost(Protocol):
    def push(self, at_s: float, action: Action) -> None: ...


@dataclass(slots=True)
class Reservation:
    """A quota reservation whose controller-run checks are being answered."""

    workload: Workload
    admission: Admission
    epoch: int
    checks: tuple[str, ...]


@dataclass(slots=True)
class Stored:
    """What the API server holds for one workload: its check entries, the objects its
    controllers own (by name), and the conditions the autoscaler will set (at, name, type)."""

    entries: list[check_states.Entry] = field(default_factory=list)
    owned: dict[str, JsonObj] = field(default_factory=dict)
    due: list[tuple[float, str, str]] = field(default_factory=list)


class CheckModels:
    """The registered controllers of one simulation; see the module docstring."""

    def __init__(self, host: ChecksHost, scenario: Scenario) -> None:
        self.host = host
        controllers = by_controller_name()
        self.controllers: dict[str, CheckController] = {}  # AdmissionCheck name → controller
        self.checks: dict[str, JsonObj] = {}  # AdmissionCheck name → as the controller reads it
        for obj in scenario.objects:
            if isinstance(obj, AdmissionCheck) and obj.controller_name in controllers:
                self.controllers[obj.meta.name] = controllers[obj.controller_name]
                self.checks[obj.meta.name] = _check_json(obj)
        self.configs = {name_of(obj): obj for obj in scenario.check_objects}
        self.flavors = {
            obj.meta.name: obj for obj in scenario.objects if isinstance(obj, ResourceFlavor)
        }
        self.scripts: Mapping[str, ProvisioningScript] = scenario.provisioning
        self.live: dict[WorkloadKey, Reservation] = {}
        self.stored: dict[WorkloadKey, Stored] = {}
        self.messages: dict[WorkloadKey, dict[str, str]] = {}  # the checks' last messages

    def runs(self, check: str) -> bool:
        """Whether `check` is answered by a registered controller (not by a script)."""
        return check in self.controllers

    def reserved(
        self,
        workload: Workload,
        admission: Admission,
        *,
        epoch: int,
        checks: tuple[str, ...],
        now_s: float,
    ) -> None:
        """Quota is reserved for `workload`; its `checks` are this model's to answer."""
        self.live[workload.key] = Reservation(workload, admission, epoch, checks)
        self.stored.setdefault(workload.key, Stored())
        self.reconcile(workload.key, now_s=now_s)

    def ended(self, key: WorkloadKey, *, finished: bool, now_s: float) -> None:
        """Its admission ended: the controllers delete what they made for it (as `reconcile`
        does for an evicted or finished workload), and an eviction resets its entries."""
        if self.live.pop(key, None) is None:
            return
        if finished:
            del self.stored[key]
            return
        stored = self.stored[key]
        stored.owned.clear()
        stored.due.clear()
        now = check_states.format_time(now_s)
        stored.entries = check_states.reset_after_eviction(
            stored.entries, evicted_at_s=now_s, now=now
        )

    def reconcile(self, key: WorkloadKey, *, now_s: float) -> None:
        """Let the autoscaler set what is due, then each controller look at the workload."""
        reservation = self.live.get(key)
        if reservation is None:
            return  # its admission ended since this look was scheduled
        stored = self.stored[key]
        now = check_states.format_time(now_s)
        stored.entries = check_states.sync_required(
            stored.entries, _all_required(stored, reservation), now=now
        )
        self._provision(stored, now_s=now_s)
        by_controller: dict[str, list[str]] = {}
        for check in reservation.checks:
            by_controller.setdefault(self.controllers[check].controller_name, []).append(check)
        for checks in by_controller.values():
            controller = self.controllers[checks[0]]
            inputs = Inputs(
                workload=self._workload(reservation, stored),
                checks={c: self._config(controller, c) for c in checks},
                owned=list(stored.owned.values()),
                flavors={},
                now_s=now_s,
            )
            self._apply(controller.reconcile(inputs), reservation, stored, now_s=now_s)

    def pod_set_updates(self, key: WorkloadKey) -> list[PodSetUpdate]:
        """What its Ready checks ask to be set on its pods (podSetUpdates), as stored now."""
        stored = self.stored.get(key)
        return ready_updates(stored.entries) if stored is not None else []

    def start_conflict(
        self, wl: Workload, admission: Admission, updates: Sequence[PodSetUpdate]
    ) -> str | None:
        """Why the pods of `wl` cannot start under `admission`: one of its Ready checks'
        `updates` conflicts with them, as the binder finds it (their annotations and
        nodeSelector, the flavors' node labels in, as `PodSetStart`s carry them, and muster's
        own label and annotation); None when none does."""
        if not updates:
            return None
        gang = gang_of_admitted(
            wl, admission, flavors=self.flavors, priority=0, created_s=0.0, with_pods=False
        )
        # The model keeps no template labels (a Job's differ per Job: they would part the
        # workloads BestEffortFIFO decides alike), so only muster's own meet an update here.
        no_labels: dict[str, str] = {}
        pods = {ps.name: (no_labels, ps.annotations, ps.node_selector) for ps in gang.pod_sets}
        return start_conflict(pods, updates, workload=wl.meta.name)

    def state_now(self, now_s: float) -> object:
        """What decides the controllers' next answers, for `Repeats` (runner.py): per workload,
        its check entries, the objects its controllers own, the autoscaler's conditions due
        and its live reservation (without the simulator's epoch), times as seconds from
        `now_s`, so that the same cycle later encodes the same."""
        return [
            (
                key,
                [_relative(entry, now_s) for entry in stored.entries],
                sorted(stored.owned.items()),
                sorted((at_s - now_s, name, condition) for at_s, name, condition in stored.due),
                None if (live := self.live.get(key)) is None else (live.admission, live.checks),
            )
            for key, stored in sorted(self.stored.items())
        ]

    def _apply(self, plan: Plan, reservation: Reservation, stored: Stored, *, now_s: float) -> None:
        """Carry out what `plan` asks, as the runner on Kubernetes would write it."""
        key, now = reservation.workload.key, check_states.format_time(now_s)
        for name in sorted({n for resource, n in plan.delete if resource == PROVISIONING_REQUESTS}):
            stored.owned.pop(name, None)
        for creation in plan.create:
            if creation.resource == PROVISIONING_REQUESTS:
                self._created(creation.manifest, reservation, stored, now_s=now_s)
        for check, answer in sorted(plan.answers.items()):
            stored.entries = check_states.set_state(
                stored.entries,
                check,
                answer.state,
                now=now,
                message=answer.message,
                **answer.fields,
            )
            self.messages.setdefault(key, {})[check] = answer.message
            if answer.state != check_states.PENDING:  # the engine holds it Pending already
                after = answer.fields.get("requeueAfterSeconds")
                after_s = after if isinstance(after, int) else 0
                self.host.push(
                    now_s, SetCheck(key, reservation.epoch, check, answer.state, after_s)
                )
        if plan.recheck_after_s is not None:
            self.host.push(now_s + plan.recheck_after_s, RunChecks(key, reservation.epoch))

    def _created(
        self, request: JsonObj, reservation: Reservation, stored: Stored, *, now_s: float
    ) -> None:
        """A ProvisioningRequest was made: the autoscaler answers it as scripted."""
        name = name_of(request)
        stored.owned[name] = request
        workload = reservation.workload.meta.name
        for check in reservation.checks:
            attempt = attempt_of(request, workload, check)
            config = config_of(self.controllers[check], self.checks[check])
            script = self.scripts.get(config or "")
            if attempt is None or not script:
                continue
            step = script[min(attempt - 1, len(script) - 1)]
            stored.due.append((now_s + step.delay_s, name, step.condition))
            self.host.push(
                now_s + step.delay_s, RunChecks(reservation.workload.key, reservation.epoch)
            )

    def _provision(self, stored: Stored, *, now_s: float) -> None:
        """Set the conditions due by now on the requests that still exist."""
        due = [d for d in stored.due if d[0] <= now_s]
        stored.due = [d for d in stored.due if d[0] > now_s]
        for _, name, condition in due:
            request = stored.owned.get(name)
            if request is None:
                continue
            message = _MESSAGES.get(condition, f"{condition} by the cluster-autoscaler (scripted)")
            status = request.setdefault("status", {})
            status.setdefault("conditions", []).append(
                {"type": condition, "status": "True", "message": message}
            )

    def _workload(self, reservation: Reservation, stored: Stored) -> JsonObj:
        """The Workload as the API server would hold it: quota reserved, its check entries."""
        wl = msgspec.structs.replace(reservation.workload, admission=reservation.admission)
        manifest = workload_to_kueue(wl)
        status = manifest.setdefault("status", {})
        status["conditions"] = [{"type": "QuotaReserved", "status": "True"}]
        status["admissionChecks"] = [dict(e) for e in stored.entries]
        return manifest

    def _config(self, controller: CheckController, check: str) -> Mapping[str, Any] | None:
        name = config_of(controller, self.checks[check])
        return self.configs.get(name) if name is not None else None


def _relative(entry: check_states.Entry, now_s: float) -> JsonObj:
    """A check entry with its lastTransitionTime as seconds before `now_s`."""
    at_s = check_states.parse_time(entry.get("lastTransitionTime"))
    return {**entry, "lastTransitionTime": None if at_s is None else at_s - now_s}


def _all_required(stored: Stored, reservation: Reservation) -> list[str]:
    """The entries to keep: this model's checks and any others already listed."""
    return sorted({*(str(e["name"]) for e in stored.entries), *reservation.checks})


def _check_json(check: AdmissionCheck) -> JsonObj:
    """An AdmissionCheck as a controller reads it: its controllerName and parameters."""
    spec: JsonObj = {"controllerName": check.controller_name}
    if check.parameters is not None:
        ref = check.parameters
        spec["parameters"] = {"apiGroup": ref.api_group, "kind": ref.kind, "name": ref.name}
    return {"metadata": {"name": check.meta.name}, "spec": spec}
