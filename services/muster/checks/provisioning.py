"""The ProvisioningRequest admission check (`controllerName: kueue.x-k8s.io/provisioning-request`),
by Kueue's rules (pkg/controller/admissionchecks/provisioning): ask the cluster-autoscaler for
the capacity a workload's reservation needs, and admit it once that capacity is there.

Per check on a Workload with reserved quota, configured by the ProvisioningRequestConfig its
AdmissionCheck's `spec.parameters` names:
- no config: Pending "the check is not active"; no podset uses a `managedResources` resource:
  Ready "the provisioning request is not needed";
- otherwise one PodTemplate per podset that needs capacity (its template, with the flavors'
  node labels and tolerations and limits as missing requests) and a ProvisioningRequest
  `<workload>-<check>-<attempt>` for them, owned by the Workload (the templates then by it);
- the request's conditions answer: Provisioned → Ready (podSetUpdates: the annotations that
  let the pods consume it); Accepted with a Provisioned message → Pending with it; Failed (or
  BookingExpired before admission) → Retry, with `requeueAfterSeconds` of an exponential
  back-off, while `attempt <= retryStrategy.backoffLimitCount`, then Rejected;
  CapacityRevoked → Rejected (the nodes are gone);
- after the eviction a Retry causes (muster resets the check to Pending, counting the retry),
  the next attempt is created once the back-off has passed;
- a finished or evicted workload's requests are deleted (the templates go with them).

Differs from Kueue: Kueue requeues a workload evicted by Retry only after the back-off, so it
holds no quota meanwhile; muster requeues it at once and this controller waits out the
back-off before the next attempt, the workload holding its reservation meanwhile. Podset
merging (`podSetMergePolicy`) is not done: one request podset per workload podset.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from muster.api import check_states
from muster.checks.framework import (
    Answer,
    Creation,
    Inputs,
    JsonObj,
    Note,
    Plan,
    condition_message,
    condition_true,
)
from muster.cluster.kube.resources import KUEUE_GROUP, Resource

CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"
CONFIG_KIND = "ProvisioningRequestConfig"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
PARAMETER_PREFIX = "provreq.kueue.x-k8s.io/"  # a Workload annotation passed as a parameter
MANAGED_LABEL = "kueue.x-k8s.io/managed"
INACTIVE = "the check is not active"
NOT_NEEDED = "the provisioning request is not needed"
_MAX_NAME = 253
_HASH = 5

PROVISIONING_REQUESTS = Resource(
    group="autoscaling.x-k8s.io",
    version="v1",
    plural="provisioningrequests",
    kind="ProvisioningRequest",
    namespaced=True,
    optional=True,  # the cluster-autoscaler's CRD may not be installed
)
POD_TEMPLATES = Resource(
    group="", version="v1", plural="podtemplates", kind="PodTemplate", namespaced=True
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


def _limited(name: str) -> str:
    """`name`, or its start and a short hash when longer than an object name may be."""
    if len(name) <= _MAX_NAME - _HASH - 1:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH]
    return f"{name[: _MAX_NAME - _HASH - 1]}-{digest}"


def request_name(workload: str, check: str, attempt: int) -> str:
    return _limited(f"{workload}-{check}-{attempt}")


def template_name(request: str, pod_set: str) -> str:
    return _limited(f"ppt-{request}-{pod_set}")


def attempt_of(request: Mapping[str, Any], workload: str, check: str) -> int | None:
    """The attempt a request named for `workload` and `check` is, or None when not theirs."""
    name = str((request.get("metadata") or {}).get("name", ""))
    prefix = _limited(f"{workload}-{check}-")
    found = re.fullmatch(re.escape(prefix) + r"([0-9]+)", name)
    return int(found.group(1)) if found else None


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _parameters(workload: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, str]:
    """The config's parameters and the workload's `provreq.kueue.x-k8s.io/<name>` ones."""
    found = {k: str(v) for k, v in (_spec(config).get("parameters") or {}).items()}
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    for key, value in annotations.items():
        if key.startswith(PARAMETER_PREFIX):
            found[key.removeprefix(PARAMETER_PREFIX)] = str(value)
    return found


def _synced(request: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Whether `request` was made with `config` as it is now (class and parameters)."""
    spec, wanted = _spec(request), _spec(config)
    if spec.get("provisioningClassName") != wanted.get("provisioningClassName"):
        return False
    have = spec.get("parameters") or {}
    return all(have.get(k) == str(v) for k, v in (wanted.get("parameters") or {}).items())


def _counts(workload: Mapping[str, Any]) -> dict[str, int]:
    """Pods per podset as admitted (the assignment's count, else the podset's)."""
    counts = {
        str(ps.get("name")): int(ps.get("count") or 0)
        for ps in _spec(workload).get("podSets") or []
    }
    admission = (workload.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        if isinstance(assignment.get("count"), int):
            counts[str(assignment.get("name"))] = assignment["count"]
    return counts


def _uses(template: Mapping[str, Any], resources: set[str]) -> bool:
    spec = template.get("spec") or {}
    for container in (*(spec.get("initContainers") or []), *(spec.get("containers") or [])):
        wanted = (container.get("resources") or {}) if isinstance(container, dict) else {}
        named = {*(wanted.get("requests") or {}), *(wanted.get("limits") or {})}
        if named & resources:
            return True
    return False


def needed_pod_sets(workload: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The podsets that need capacity: with pods, and using a managed resource (any when
    `managedResources` is empty)."""
    managed = set(_spec(config).get("managedResources") or [])
    counts = _counts(workload)
    return [
        str(ps.get("name"))
        for ps in _spec(workload).get("podSets") or []
        if counts.get(str(ps.get("name")), 0) > 0
        and (not managed or _uses(ps.get("template") or {}, managed))
    ]


def _owner(workload: Mapping[str, Any]) -> JsonObj:
    meta = workload.get("metadata") or {}
    return {
        "apiVersion": workload.get("apiVersion", f"{KUEUE_GROUP}/v1beta1"),
        "kind": "Workload",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _placed(template: Mapping[str, Any], flavors: list[Mapping[str, Any]]) -> JsonObj:
    """A podset's pod template as its pods will be: the flavors' node labels and tolerations
    added, and each container's limits standing for requests it does not state."""
    placed: JsonObj = copy.deepcopy(dict(template))
    spec = placed.setdefault("spec", {})
    for flavor in flavors:
        flavor_spec = _spec(flavor)
        spec.setdefault("nodeSelector", {}).update(flavor_spec.get("nodeLabels") or {})
        tolerations = spec.setdefault("tolerations", [])
        tolerations += [t for t in flavor_spec.get("tolerations") or [] if t not in tolerations]
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            wanted = container.setdefault("resources", {})
            limits = wanted.get("limits") or {}
            if limits:
                wanted["requests"] = {**limits, **(wanted.get("requests") or {})}
    return placed


def _creations(
    inputs: Inputs, check: str, config: Mapping[str, Any], attempt: int
) -> list[Creation]:
    """The PodTemplates, then the ProvisioningRequest, of one attempt."""
    wl = inputs.workload
    meta = wl.get("metadata") or {}
    namespace, workload = str(meta.get("namespace", "")), str(meta.get("name", ""))
    name = request_name(workload, check, attempt)
    counts = _counts(wl)
    admission = (wl.get("status") or {}).get("admission") or {}
    assigned = {str(a.get("name")): a for a in admission.get("podSetAssignments") or []}
    pod_sets = {str(ps.get("name")): ps for ps in _spec(wl).get("podSets") or []}
    labels = {MANAGED_LABEL: "true"}
    templates, request_sets = [], []
    for pod_set in needed_pod_sets(wl, config):
        flavor_names = sorted(set((assigned.get(pod_set) or {}).get("flavors", {}).values()))
        flavors = [inputs.flavors[f] for f in flavor_names if f in inputs.flavors]
        template = template_name(name, pod_set)
        manifest = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {
                "name": template,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [_owner(wl)],
            },
            "template": _placed(pod_sets[pod_set].get("template") or {}, flavors),
        }
        templates.append(Creation(resource=POD_TEMPLATES, manifest=manifest))
        request_sets.append({"podTemplateRef": {"name": template}, "count": counts[pod_set]})
    request = {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [_owner(wl)],
        },
        "spec": {
            "provisioningClassName": _spec(config).get("provisioningClassName", ""),
            "parameters": _parameters(wl, config),
            "podSets": request_sets,
        },
    }
    adopts = tuple((POD_TEMPLATES, t.manifest["metadata"]["name"]) for t in templates)
    return [*templates, Creation(resource=PROVISIONING_REQUESTS, manifest=request, adopts=adopts)]


def _pod_set_updates(request: Mapping[str, Any], config: Mapping[str, Any]) -> list[JsonObj]:
    """What a Ready check puts on each podset's pods: the annotations naming the request
    they consume, and the node labels the config takes from the request's class details."""
    meta, spec = request.get("metadata") or {}, _spec(request)
    details = (request.get("status") or {}).get("provisioningClassDetails") or {}
    selectors = (_spec(config).get("podSetUpdates") or {}).get("nodeSelector") or []
    name = str(meta.get("name", ""))
    updates = []
    for pod_set in spec.get("podSets") or []:
        template = str((pod_set.get("podTemplateRef") or {}).get("name", ""))
        update: JsonObj = {
            "name": template.removeprefix(f"ppt-{name}-"),
            "annotations": {
                CONSUME_ANNOTATION: name,
                CLASS_ANNOTATION: str(spec.get("provisioningClassName", "")),
            },
        }
        nodes = {
            str(s["key"]): str(details[s["valueFromProvisioningClassDetail"]])
            for s in selectors
            if isinstance(s, dict) and s.get("valueFromProvisioningClassDetail") in details
        }
        if nodes:
            update["nodeSelector"] = nodes
        updates.append(update)
    return updates


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
        active = _spec(workload).get("active", True) is not False
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
            fields={"podSetUpdates": _pod_set_updates(request, config)},
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
            plan.delete = [(PROVISIONING_REQUESTS, _name(r)) for r in inputs.owned]
            return plan
        if not condition_true(wl, "QuotaReserved"):
            return plan
        entries = check_states.entries_of(wl.get("status"))
        kept: set[str] = set()
        for check, config in sorted(inputs.checks.items()):
            entry = check_states.find(entries, check) or {}
            self._check(plan, inputs, check, config, entry, kept)
        plan.delete = [
            (PROVISIONING_REQUESTS, _name(r)) for r in inputs.owned if _name(r) not in kept
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
        workload = _name(inputs.workload)
        attempts = [
            (a, r)
            for r in inputs.owned
            if (a := attempt_of(r, workload, check)) is not None and _synced(r, config)
        ]
        last = max(attempts, key=lambda found: found[0], default=None)
        answer = None
        if last is not None:
            kept.add(_name(last[1]))
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
        creations = _creations(inputs, check, config, attempt)
        plan.create += creations
        name = _name(creations[-1].manifest)
        created = f'Created ProvisioningRequest: "{name}"'
        plan.notes.append(Note(type="Normal", reason="ProvisioningRequestCreated", note=created))
        return answer


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))
