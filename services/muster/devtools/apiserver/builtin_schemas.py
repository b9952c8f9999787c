"""Structural schemas of the built-in kinds that field validation checks (`fields`): batch/v1
Jobs and v1 Pods, down to their containers' fields and resources (Kubernetes v1.36's API).
Below that level, and for the parts tests never write (probes, volumes, security contexts),
a field's contents are left open.
"""

from __future__ import annotations

from typing import Any, Final

Schema = dict[str, Any]
OPEN: Final[Schema] = {"x-kubernetes-preserve-unknown-fields": True}


def _object(*open_fields: str, **fields: Schema) -> Schema:
    return {"type": "object", "properties": {**dict.fromkeys(open_fields, OPEN), **fields}}


def _list(item: Schema) -> Schema:
    return {"type": "array", "items": item}


_RESOURCES = _object("limits", "requests", "claims")
_CONTAINER = _object(
    "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle",
    "livenessProbe", "name", "ports", "readinessProbe", "resizePolicy", "restartPolicy",
    "restartPolicyRules", "securityContext", "startupProbe", "stdin", "stdinOnce",
    "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices",
    "volumeMounts", "workingDir",
    resources=_RESOURCES,
)  # fmt: skip
_TOLERATION = _object("key", "operator", "value", "effect", "tolerationSeconds")
POD_SPEC: Final = _object(
    "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "dnsConfig",
    "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "hostAliases", "hostIPC",
    "hostNetwork", "hostPID", "hostUsers", "hostname", "hostnameOverride", "imagePullSecrets",
    "nodeName", "nodeSelector", "os", "overhead", "preemptionPolicy", "priority",
    "priorityClassName", "readinessGates", "resourceClaims", "resources", "restartPolicy",
    "runtimeClassName", "schedulerName", "schedulingGates", "schedulingGroup", "securityContext",
    "serviceAccount", "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace",
    "subdomain", "terminationGracePeriodSeconds", "topologySpreadConstraints", "volumes",
    "workloadRef",
    containers=_list(_CONTAINER),
    initContainers=_list(_CONTAINER),
    tolerations=_list(_TOLERATION),
)  # fmt: skip
_TEMPLATE = _object("metadata", spec=POD_SPEC)
JOB_SPEC: Final = _object(
    "activeDeadlineSeconds", "backoffLimit", "backoffLimitPerIndex", "completionMode",
    "completions", "managedBy", "manualSelector", "maxFailedIndexes", "parallelism",
    "podFailurePolicy", "podReplacementPolicy", "scheduling", "selector", "successPolicy",
    "suspend", "ttlSecondsAfterFinished",
    template=_TEMPLATE,
)  # fmt: skip

BUILTIN: Final[dict[tuple[str, str], Schema]] = {
    ("batch", "jobs"): _object(spec=JOB_SPEC),
    ("", "pods"): _object(spec=POD_SPEC),
}
