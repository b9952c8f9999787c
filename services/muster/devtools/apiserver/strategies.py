"""Per-kind behaviour of the real API server that muster relies on: defaults, server-set
fields, validation, and which fields an update may change.

- Pods (and Jobs' pod templates): pod-level requests that cover the containers' total
  (`pod_resources`).
- Pods: scheduler/DNS/grace defaults, limits as missing requests, the namespace's LimitRanges
  (`limit_ranger`: their defaults, or 403 outside their bounds), priority from the
  PriorityClass (403 when it does not exist), the two default NoExecute tolerations, status
  reset to Pending on create; the spec is immutable except container images,
  activeDeadlineSeconds, added tolerations and removed schedulingGates; `spec.nodeName`
  changes only through pods/binding, and is refused on a pod created with schedulingGates.
- Jobs: selector and controller-uid/job-name labels, completions/parallelism/backoffLimit
  defaults; `restartPolicy` OnFailure or Never; the template's labels and annotations checked as an
  object's; the pod template is immutable except its
  labels, annotations, nodeSelector, tolerations, affinity and schedulingGates while the Job is
  suspended and has never started (what Kueue uses to inject a flavor's node labels), and,
  with `FeatureGates.mutable_pod_resources_for_suspended_jobs` (KEP-5440), its containers' and
  init containers' resources while the Job is suspended and has no active pods (the update
  that unsuspends it may change them: the old Job's state counts). The status of a Job
  managed by another controller (`spec.managedBy`) follows `job_status`'s rules.
- Namespaces, PriorityClasses and CustomResourceDefinitions get their server-set fields.
- The scheduling.k8s.io gang API (Workloads, PodGroups, CompositePodGroups): `gangs`.
- events.k8s.io/v1 Events: `events`; PodTemplates and ProvisioningRequests: `provisioning`.
"""

from __future__ import annotations

from typing import Any

from muster.devtools.apiserver.errors import (
    Cause,
    bad_value,
    duplicate,
    forbidden,
    forbidden_request,
    immutable,
    required,
    unsupported,
)
from muster.devtools.apiserver.events import EventStrategy
from muster.devtools.apiserver.gangs import GANG_STRATEGIES
from muster.devtools.apiserver.job_status import job_status_causes, managed_elsewhere
from muster.devtools.apiserver.limit_ranger import LimitRangeStrategy, admit_pod, default_requests
from muster.devtools.apiserver.objects import JsonObj, meta, name_of
from muster.devtools.apiserver.pod_resources import pod_level_causes
from muster.devtools.apiserver.provisioning import PROVISIONING_STRATEGIES
from muster.devtools.apiserver.resources import ResourceType, crd_status, from_crd
from muster.devtools.apiserver.runtime_class_admission import admit_runtime_class
from muster.devtools.apiserver.strategy_base import V1_36, Context, FeatureGates, Strategy
from muster.devtools.apiserver.validation import dns_label_causes, labels_and_annotations_causes

__all__ = ["Context", "Strategy", "strategy_for"]

INT32_MAX = 2**31 - 1
DEFAULT_TOLERATION_SECONDS = 300


def _default_pod_spec(spec: JsonObj) -> None:
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or []:
            if not isinstance(container, dict):
                continue
            image = container.get("image")
            if isinstance(image, str) and image:
                tag = image.rsplit("/", 1)[-1]
                latest = ":" not in tag or tag.endswith(":latest")
                container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("resources", {})


def _container_causes(spec: Any, path: str) -> list[Cause]:
    if not isinstance(spec, dict):
        return [required(path)]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return [required(f"{path}.containers")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, container in enumerate(containers):
        at = f"{path}.containers[{i}]"
        name = container.get("name") if isinstance(container, dict) else None
        if not isinstance(name, str) or not name:
            causes.append(required(f"{at}.name"))
        else:
            causes += dns_label_causes(f"{at}.name", name)
            if name in seen:
                causes.append(duplicate(f"{at}.name", name))
            seen.add(name)
        if not isinstance(container, dict) or not container.get("image"):
            causes.append(required(f"{at}.image"))
    return causes


def _tolerates(tolerations: list[Any], key: str) -> bool:
    return any(
        isinstance(t, dict) and t.get("key") == key and t.get("effect") in ("NoExecute", None, "")
        for t in tolerations
    ) or any(
        isinstance(t, dict) and not t.get("key") and t.get("operator") == "Exists"
        for t in tolerations
    )


class PodStrategy(Strategy):
    def defaults(self, obj: JsonObj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("enableServiceLinks", True)
            _default_pod_spec(spec)
            default_requests(spec)

    def prepare_create(self, obj: JsonObj, ctx: Context) -> None:
        spec = obj["spec"]
        admit_pod(obj, ctx.limit_ranges(meta(obj).get("namespace", "")))
        self._admit_priority(spec, ctx)
        # The DefaultTolerationSeconds admission plugin.
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not _tolerates(tolerations, key):
                tolerations.append(
                    {
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                    }
                )
        admit_runtime_class(obj, ctx.runtime_class)  # after DefaultTolerationSeconds, as there
        obj["status"] = {"phase": "Pending"}

    def _admit_priority(self, spec: JsonObj, ctx: Context) -> None:
        """The Priority admission plugin: spec.priority comes from the PriorityClass."""
        class_name = spec.get("priorityClassName")
        if class_name:
            pc = ctx.priority_class(class_name)
            if pc is None:
                raise forbidden_request(f"no PriorityClass with name {class_name} was found")
        else:
            pc = ctx.global_default_priority_class()
        value = int(pc.get("value", 0)) if pc else 0
        if "priority" in spec and spec["priority"] != value:
            raise forbidden_request(
                f"the integer value of priority ({spec['priority']}) must not be provided in pod "
                f"spec; the priority admission controller computed {value} from the PriorityClass"
            )
        spec["priority"] = value
        if pc:
            spec.setdefault("priorityClassName", name_of(pc))
            spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy", "PreemptLowerPriority"))
        else:
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")

    def causes(self, obj: JsonObj) -> list[Cause]:
        spec = obj.get("spec")
        causes = _container_causes(spec, "spec") + pod_level_causes(spec, "spec")
        policy = spec.get("restartPolicy") if isinstance(spec, dict) else None
        if policy not in ("Always", "OnFailure", "Never"):
            causes.append(
                unsupported("spec.restartPolicy", policy, ["Always", "OnFailure", "Never"])
            )
        if isinstance(spec, dict) and spec.get("nodeName") and spec.get("schedulingGates"):
            # Created on its node (no scheduler) while gated: the real server refuses both.
            why = "cannot be set until all schedulingGates have been cleared"
            causes.append(forbidden("spec.nodeName", why))
        return causes

    def update_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        comparable = dict(new_spec)
        for field in ("containers", "initContainers"):
            olds = old_spec.get(field) or []
            news = new_spec.get(field) or []
            if field in new_spec and len(news) == len(olds):  # images may change, nothing else
                comparable[field] = [
                    {**n, "image": o.get("image")}
                    if isinstance(n, dict) and isinstance(o, dict)
                    else n
                    for n, o in zip(news, olds, strict=True)
                ]
        deadline, old_deadline = (
            new_spec.get("activeDeadlineSeconds"),
            old_spec.get("activeDeadlineSeconds"),
        )
        if deadline is not None and (old_deadline is None or deadline <= old_deadline):
            comparable["activeDeadlineSeconds"] = old_deadline
            if old_deadline is None:
                comparable.pop("activeDeadlineSeconds")
        old_tolerations = old_spec.get("tolerations") or []
        new_tolerations = new_spec.get("tolerations") or []
        if all(t in new_tolerations for t in old_tolerations):  # additions only
            _restore(comparable, old_spec, "tolerations")
        old_gates = old_spec.get("schedulingGates") or []
        if all(g in old_gates for g in new_spec.get("schedulingGates") or []):  # removals only
            _restore(comparable, old_spec, "schedulingGates")
        if comparable == old_spec:
            return []
        if comparable.get("nodeName") != old_spec.get("nodeName"):
            return [
                forbidden("spec.nodeName", "a pod is assigned to a node through pods/binding only")
            ]
        return [
            forbidden(
                "spec",
                "pod updates may change only container images, activeDeadlineSeconds, "
                "tolerations (additions) and schedulingGates (removals)",
            )
        ]


def _restore(target: JsonObj, source: JsonObj, field: str) -> None:
    if field in source:
        target[field] = source[field]
    else:
        target.pop(field, None)


_JOB_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)
# Template fields a suspended Job that never started may change (mutable scheduling directives).
_MUTABLE_WHILE_SUSPENDED_SPEC = ("nodeSelector", "tolerations", "affinity", "schedulingGates")
_MUTABLE_WHILE_SUSPENDED_META = ("labels", "annotations")


class JobStrategy(Strategy):
    name_check = "label-value"  # the name becomes the job-name label

    def __init__(self, gates: FeatureGates = V1_36) -> None:
        self.gates = gates

    def defaults(self, obj: JsonObj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", INT32_MAX if "backoffLimitPerIndex" in spec else 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault(
            "podReplacementPolicy",
            "Failed" if "podFailurePolicy" in spec else "TerminatingOrFailed",
        )
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            _default_pod_spec(template["spec"])

    def prepare_create(self, obj: JsonObj, ctx: Context) -> None:
        spec = obj["spec"]
        md = meta(obj)
        uid, name = md["uid"], md["name"]
        if not spec.get("manualSelector"):
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            template = spec.setdefault("template", {})
            labels = meta(template).setdefault("labels", {})
            labels.update(dict(zip(_JOB_LABELS, (uid, name, uid, name), strict=True)))
        obj["status"] = {}

    def causes(self, obj: JsonObj) -> list[Cause]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [required("spec")]
        template = spec.get("template")
        template_spec = template.get("spec") if isinstance(template, dict) else None
        causes = _container_causes(template_spec, "spec.template.spec")
        causes += pod_level_causes(template_spec, "spec.template.spec")
        if isinstance(template, dict) and isinstance(template.get("metadata"), dict):
            # As ValidatePodTemplateSpec: what a controller writes there is checked too.
            causes += labels_and_annotations_causes(template["metadata"], "spec.template.metadata")
        policy = (
            (template.get("spec") or {}).get("restartPolicy")
            if isinstance(template, dict)
            else None
        )
        if policy in (None, ""):
            causes.append(
                required("spec.template.spec.restartPolicy", 'valid values: "OnFailure", "Never"')
            )
        elif policy not in ("OnFailure", "Never"):
            causes.append(
                unsupported("spec.template.spec.restartPolicy", policy, ["OnFailure", "Never"])
            )
        for field in ("parallelism", "completions", "backoffLimit"):
            value = spec.get(field)
            if value is not None and (not isinstance(value, int) or value < 0):
                causes.append(
                    bad_value(f"spec.{field}", value, "must be greater than or equal to 0")
                )
        if spec.get("manualSelector") and not isinstance(spec.get("selector"), dict):
            causes.append(required("spec.selector"))
        return causes

    def update_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        causes = [
            immutable(f"spec.{field}", new_spec.get(field))
            for field in ("selector", "completionMode", "completions", "manualSelector")
            if new_spec.get(field) != old_spec.get(field)
        ]
        new_template, old_template = new_spec.get("template") or {}, old_spec.get("template") or {}
        if new_template == old_template:
            return causes
        old_status = old.get("status") or {}
        never_started = old_status.get("startTime") is None
        comparable = {
            **new_template,
            "metadata": dict(new_template.get("metadata") or {}),
            "spec": dict(new_template.get("spec") or {}),
        }
        if old_spec.get("suspend") and never_started:
            for field in _MUTABLE_WHILE_SUSPENDED_META:
                _restore(comparable["metadata"], old_template.get("metadata") or {}, field)
            for field in _MUTABLE_WHILE_SUSPENDED_SPEC:
                _restore(comparable["spec"], old_template.get("spec") or {}, field)
        resizable = self.gates.mutable_pod_resources_for_suspended_jobs
        if resizable and old_spec.get("suspend") and not old_status.get("active"):
            _restore_resources(comparable["spec"], old_template.get("spec") or {})
        if not comparable["metadata"] and "metadata" not in old_template:
            del comparable["metadata"]
        if comparable != old_template:
            causes.append(immutable("spec.template", "{...}"))
        return causes

    def status_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        return job_status_causes(new, old) if managed_elsewhere(new) else []


def _restore_resources(spec: JsonObj, old_spec: JsonObj) -> None:
    """Put the old containers' `resources` into `spec` (the same containers only), so that a
    comparison ignores them (KEP-5440)."""
    for field in ("containers", "initContainers"):
        new, old = spec.get(field), old_spec.get(field)
        if not isinstance(new, list) or not isinstance(old, list) or len(new) != len(old):
            continue
        if not all(isinstance(c, dict) for c in (*new, *old)):
            continue
        restored = []
        for n, o in zip(new, old, strict=True):
            container = {k: v for k, v in n.items() if k != "resources"}
            if "resources" in o:
                container["resources"] = o["resources"]
            restored.append(container)
        spec[field] = restored


class NamespaceStrategy(Strategy):
    name_check = "label"

    def defaults(self, obj: JsonObj) -> None:
        # The server keeps this label equal to the name, so namespaceSelectors can match it.
        meta(obj).setdefault("labels", {})["kubernetes.io/metadata.name"] = name_of(obj)

    def prepare_create(self, obj: JsonObj, ctx: Context) -> None:
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}


class PriorityClassStrategy(Strategy):
    def defaults(self, obj: JsonObj) -> None:
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")

    def causes(self, obj: JsonObj) -> list[Cause]:
        value = obj.get("value")
        if not isinstance(value, int) or isinstance(value, bool):
            return [required("value")]
        return []

    def update_causes(self, new: JsonObj, old: JsonObj) -> list[Cause]:
        return (
            [immutable("value", new.get("value"))] if new.get("value") != old.get("value") else []
        )


class CrdStrategy(Strategy):
    def prepare_create(self, obj: JsonObj, ctx: Context) -> None:
        obj["status"] = crd_status(obj, now=ctx.now)

    def causes(self, obj: JsonObj) -> list[Cause]:
        return from_crd(obj)[1]


_STRATEGIES: dict[tuple[str, str], Strategy] = {
    ("", "pods"): PodStrategy(),
    ("batch", "jobs"): JobStrategy(),
    ("", "namespaces"): NamespaceStrategy(),
    ("", "limitranges"): LimitRangeStrategy(),
    ("scheduling.k8s.io", "priorityclasses"): PriorityClassStrategy(),
    ("apiextensions.k8s.io", "customresourcedefinitions"): CrdStrategy(),
    ("events.k8s.io", "events"): EventStrategy(),
    **GANG_STRATEGIES,
    **PROVISIONING_STRATEGIES,
}
_DEFAULT = Strategy()


def strategy_for(rt: ResourceType, gates: FeatureGates = V1_36) -> Strategy:
    if rt.key == ("batch", "jobs") and gates != V1_36:
        return JobStrategy(gates)
    return _STRATEGIES.get(rt.key, _DEFAULT)
