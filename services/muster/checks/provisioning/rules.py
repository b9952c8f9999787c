"""The ProvisioningRequest check's rules: its answer from a request's conditions, in Kueue's
order of precedence, and `ProvisioningController.reconcile` (package docstring). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from muster.api import check_states
from muster.api.resource import Resource
from muster.api.wellknown import KUEUE_GROUP
from muster.checks.framework import Answer, Inputs, Note, Plan, condition_message, condition_true
from muster.checks.provisioning.objects import (
    CONFIG_KIND,
    CONTROLLER_NAME,
    INACTIVE,
    NOT_NEEDED,
    POD_TEMPLATES,
    PROVISIONING_REQUESTS,
    attempt_of,
    creations,
    name_of,
    needed_pod_sets,
    pod_set_updates,
    spec_of,
    synced,
)


class RetryStrategy(NamedTuple):
    limit: int  # attempts that may fail before Rejected
    base_s: int
    max_s: int

    def backoff_s(self, attempt: int) -> int:
        """Kueue's wait before retrying after failed attempt `attempt`: base·2^(n-1), capped."""
        return int(min(self.base_s * 2 ** max(attempt - 1, 0), self.max_s))


def retry_strategy(config: Mapping[str, Any]) -> RetryStrategy:
    """`spec.retryStrategy` with Kueue's defaults (3 retries, 60 s doubling up to 1800 s)."""
    raw = (config.get("spec") or {}).get("retryStrategy") or {}

    def number(field: str, default: int) -> int:
        value = raw.get(field)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    return RetryStrategy(
        number("backoffLimitCount", 3),
        number("backoffBaseSeconds", 60),
        number("backoffMaxSeconds", 1800),
    )


def _retry_or_reject(
    request: Mapping[str, Any],
    entry: Mapping[str, Any],
    *,
    condition: str,
    prefix: str,
    attempt: int,
    strategy: RetryStrategy,
) -> Answer:
    """A failed attempt: Retry (with its back-off) while attempts remain, then Rejected."""
    why = condition_message(request, condition)
    if attempt > strategy.limit:
        return Answer(state=check_states.REJECTED, message=why)
    if attempt > int(entry.get("retryCount") or 0):  # newer than the retries counted so far
        backoff = {"requeueAfterSeconds": strategy.backoff_s(attempt)}
        return Answer(state=check_states.RETRY, message=prefix + why, fields=backoff)
    state = str(entry.get("state") or check_states.PENDING)
    return Answer(state=state, message=prefix + why)


def _answer_of(
    request: Mapping[str, Any],
    entry: Mapping[str, Any],
    *,
    attempt: int,
    strategy: RetryStrategy,
    workload: Mapping[str, Any],
    config: Mapping[str, Any],
) -> Answer | None:
    """The check's answer from its request's conditions, in Kueue's order of precedence;
    None: leave the entry as it is."""
    admitted = condition_true(workload, "Admitted")
    if condition_true(request, "Failed"):
        prefix = "Retrying after failure: "
        return _retry_or_reject(
            request, entry, condition="Failed", prefix=prefix, attempt=attempt, strategy=strategy
        )
    if condition_true(request, "CapacityRevoked"):
        active = spec_of(workload).get("active", True) is not False
        if not active or condition_true(workload, "Finished"):
            return None
        why = condition_message(request, "CapacityRevoked")
        return Answer(state=check_states.REJECTED, message=why)
    if condition_true(request, "BookingExpired"):
        if admitted:
            return None  # the booking has served its purpose
        return _retry_or_reject(
            request,
            entry,
            condition="BookingExpired",
            prefix="Retrying after booking expired: ",
            attempt=attempt,
            strategy=strategy,
        )
    if condition_true(request, "Provisioned"):
        if entry.get("state") == check_states.READY:
            return None
        return Answer(
            state=check_states.READY,
            message=condition_message(request, "Provisioned"),
            fields={"podSetUpdates": pod_set_updates(request, config)},
        )
    if condition_true(request, "Accepted") and _has_condition(request, "Provisioned"):
        # Not provisioned yet: its message says when it expects to be (an ETA).
        why = condition_message(request, "Provisioned")
        return Answer(state=check_states.PENDING, message=why)
    return Answer(state=check_states.PENDING)


def _has_condition(obj: Mapping[str, Any], type_: str) -> bool:
    return any(
        isinstance(c, dict) and c.get("type") == type_
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _differs(entry: Mapping[str, Any], answer: Answer) -> bool:
    if entry.get("state") != answer.state or (entry.get("message") or "") != answer.message:
        return True
    return any(entry.get(k) != v for k, v in answer.fields.items())


def _retry_at_s(entry: Mapping[str, Any]) -> float | None:
    """When a retried check may make its next attempt: its back-off after the reset."""
    after = entry.get("requeueAfterSeconds")
    since = check_states.parse_time(entry.get("lastTransitionTime"))
    if not entry.get("retryCount") or not isinstance(after, int) or since is None:
        return None
    return since + after


class ProvisioningController:
    """`CheckController` for `kueue.x-k8s.io/provisioning-request`."""

    controller_name: str = CONTROLLER_NAME
    owned: Resource = PROVISIONING_REQUESTS
    creates: tuple[Resource, ...] = (POD_TEMPLATES, PROVISIONING_REQUESTS)

    def __init__(self, *, kueue_version: str = "v1beta1") -> None:
        self.config = Resource(
            group=KUEUE_GROUP,
            version=kueue_version,
            plural="provisioningrequestconfigs",
            kind=CONFIG_KIND,
            namespaced=False,
            optional=True,
        )

    def reconcile(self, inputs: Inputs) -> Plan:
        """What to do for one workload now (see the module docstring)."""
        wl, plan = inputs.workload, Plan()
        if condition_true(wl, "Finished") or condition_true(wl, "Evicted"):
            plan.delete = [(PROVISIONING_REQUESTS, name_of(r)) for r in inputs.owned]
            return plan
        if not condition_true(wl, "QuotaReserved"):
            return plan
        entries = check_states.entries_of(wl.get("status"))
        kept: set[str] = set()
        for check, config in sorted(inputs.checks.items()):
            entry = check_states.find(entries, check) or {}
            self._check(plan, inputs, check, config, entry, kept)
        plan.delete = [
            (PROVISIONING_REQUESTS, name_of(r)) for r in inputs.owned if name_of(r) not in kept
        ]
        return plan

    def _check(
        self,
        plan: Plan,
        inputs: Inputs,
        check: str,
        config: Mapping[str, Any] | None,
        entry: Mapping[str, Any],
        kept: set[str],
    ) -> None:
        """One check: its answer, and the request attempt to create if one is due."""
        state = str(entry.get("state") or check_states.PENDING)
        if config is None:
            answer: Answer | None = Answer(state=check_states.PENDING, message=INACTIVE)
        elif not needed_pod_sets(inputs.workload, config):
            answer = (
                None
                if state == check_states.READY
                else Answer(
                    state=check_states.READY, message=NOT_NEEDED, fields={"podSetUpdates": None}
                )
            )
        else:
            answer = self._request(plan, inputs, check, config, entry, kept)
        if answer is not None and _differs(entry, answer):
            plan.answers[check] = answer
            if answer.state != state:
                text = f"Admission check {check} updated state from {state} to {answer.state}"
                note = text + (f" with message: {answer.message}" if answer.message else "")
                plan.notes.append(Note(type="Normal", reason="AdmissionCheckUpdated", note=note))

    def _request(
        self,
        plan: Plan,
        inputs: Inputs,
        check: str,
        config: Mapping[str, Any],
        entry: Mapping[str, Any],
        kept: set[str],
    ) -> Answer | None:
        """The answer the check's last request gives, and its next attempt when one is due."""
        workload = name_of(inputs.workload)
        attempts = [
            (a, r)
            for r in inputs.owned
            if (a := attempt_of(r, workload, check)) is not None and synced(r, config)
        ]
        last = max(attempts, key=lambda found: found[0], default=None)
        answer = None
        if last is not None:
            kept.add(name_of(last[1]))
            answer = _answer_of(
                last[1],
                entry,
                attempt=last[0],
                strategy=retry_strategy(config),
                workload=inputs.workload,
                config=config,
            )
        state = answer.state if answer is not None else entry.get("state", check_states.PENDING)
        if state != check_states.PENDING:
            return answer
        if last is None:
            attempt = int(entry.get("retryCount") or 0) + 1
        elif condition_true(last[1], "Failed") or (
            condition_true(last[1], "BookingExpired")
            and not condition_true(inputs.workload, "Admitted")
        ):
            attempt = last[0] + 1
        else:
            return answer
        retry_at_s = _retry_at_s(entry)
        if retry_at_s is not None and inputs.now_s < retry_at_s:
            plan.recheck_after_s = min(plan.recheck_after_s or 1e18, retry_at_s - inputs.now_s)
            return answer
        made = creations(inputs, check, config, attempt)
        plan.create += made
        name = name_of(made[-1].manifest)
        created = f'Created ProvisioningRequest: "{name}"'
        plan.notes.append(Note(type="Normal", reason="ProvisioningRequestCreated", note=created))
        return answer
