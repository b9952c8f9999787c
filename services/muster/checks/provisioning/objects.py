"""The objects the ProvisioningRequest check makes and reads: names (`<workload>-<check>-
<attempt>`, `ppt-<request>-<podset>`, cut to object-name length with a hash), the PodTemplate
of each podset that needs capacity, the ProvisioningRequest for them, and what a Ready check
puts on the pods (`podSetUpdates`). Pure."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from muster.api.resource import Resource
from muster.api.wellknown import KUEUE_GROUP, PROVISIONING_CONTROLLER
from muster.checks.framework import Creation, Inputs, JsonObj

CONTROLLER_NAME = PROVISIONING_CONTROLLER
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


def spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _parameters(workload: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, str]:
    """The config's parameters and the workload's `provreq.kueue.x-k8s.io/<name>` ones."""
    found = {k: str(v) for k, v in (spec_of(config).get("parameters") or {}).items()}
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    for key, value in annotations.items():
        if key.startswith(PARAMETER_PREFIX):
            found[key.removeprefix(PARAMETER_PREFIX)] = str(value)
    return found


def synced(request: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Whether `request` was made with `config` as it is now (class and parameters)."""
    spec, wanted = spec_of(request), spec_of(config)
    if spec.get("provisioningClassName") != wanted.get("provisioningClassName"):
        return False
    have = spec.get("parameters") or {}
    return all(have.get(k) == str(v) for k, v in (wanted.get("parameters") or {}).items())


def _counts(workload: Mapping[str, Any]) -> dict[str, int]:
    """Pods per podset as admitted (the assignment's count, else the podset's)."""
    counts = {
        str(ps.get("name")): int(ps.get("count") or 0)
        for ps in spec_of(workload).get("podSets") or []
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
    managed = set(spec_of(config).get("managedResources") or [])
    counts = _counts(workload)
    return [
        str(ps.get("name"))
        for ps in spec_of(workload).get("podSets") or []
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
        flavor_spec = spec_of(flavor)
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


def creations(
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
    pod_sets = {str(ps.get("name")): ps for ps in spec_of(wl).get("podSets") or []}
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
            "provisioningClassName": spec_of(config).get("provisioningClassName", ""),
            "parameters": _parameters(wl, config),
            "podSets": request_sets,
        },
    }
    adopts = tuple((POD_TEMPLATES, t.manifest["metadata"]["name"]) for t in templates)
    return [*templates, Creation(resource=PROVISIONING_REQUESTS, manifest=request, adopts=adopts)]


def pod_set_updates(request: Mapping[str, Any], config: Mapping[str, Any]) -> list[JsonObj]:
    """What a Ready check puts on each podset's pods: the annotations naming the request
    they consume, and the node labels the config takes from the request's class details."""
    meta, spec = request.get("metadata") or {}, spec_of(request)
    details = (request.get("status") or {}).get("provisioningClassDetails") or {}
    selectors = (spec_of(config).get("podSetUpdates") or {}).get("nodeSelector") or []
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


def name_of(obj: Mapping[str, Any]) -> str:
    """`obj`'s metadata.name."""
    return str((obj.get("metadata") or {}).get("name", ""))
