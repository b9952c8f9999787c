"""POST pods/{name}/binding: how a scheduler assigns a pod to a node.

As on the real server: the answer is a `Status` (Success, 201), not the Binding; a pod already
bound, being deleted, or still carrying schedulingGates is a 409 Conflict on `pods/binding`
(messages kept as the real server words them, since clients match on them); the binding's
annotations and labels are merged into the pod, `status.nominatedNodeName` is cleared and the
PodScheduled condition set.
"""

from __future__ import annotations

from typing import Any

from muster.devtools.apiserver.errors import (
    bad_request,
    bad_value,
    conflict,
    invalid,
    precondition_failed,
    required,
)
from muster.devtools.apiserver.objects import JsonObj, deep_copy, meta, string_map, timestamp
from muster.devtools.apiserver.verbs import Verbs


def bind(api: Verbs, namespace: str, name: str, body: Any) -> JsonObj:
    """POST pods/{name}/binding: set spec.nodeName once; 409 when bound, deleting or gated."""
    pods = api.registry.by_key(("", "pods"))
    assert pods is not None
    if not isinstance(body, dict):
        raise bad_request("the body of the request must be a Binding object")
    raw_meta, raw_target = body.get("metadata"), body.get("target")
    binding_meta: JsonObj = raw_meta if isinstance(raw_meta, dict) else {}
    target: JsonObj = raw_target if isinstance(raw_target, dict) else {}
    if binding_meta.get("name", name) != name:
        raise bad_request(f"the Binding's name ({binding_meta['name']}) differs from the pod's")
    node = target.get("name")
    if not isinstance(node, str) or not node:
        raise invalid("", "Binding", name, [required("target.name")])
    if target.get("kind") not in (None, "", "Node"):
        kind_cause = bad_value("target.kind", target.get("kind"), 'must be "Node"')
        raise invalid("", "Binding", name, [kind_cause])
    pod = api.get(pods, namespace, name)
    pod_md = meta(pod)
    for field in ("uid", "resourceVersion"):
        wanted = binding_meta.get(field)
        if wanted and wanted != pod_md.get(field):
            raise precondition_failed(
                "", "pods/binding", name, field=field, wanted=wanted, actual=pod_md.get(field)
            )
    spec = pod.get("spec") or {}
    if pod_md.get("deletionTimestamp"):
        raise conflict(
            "",
            "pods/binding",
            name,
            f"pod {name} is being deleted, cannot be assigned to a host",
        )
    if spec.get("nodeName"):
        raise conflict(
            "",
            "pods/binding",
            name,
            f'pod {name} is already assigned to node "{spec["nodeName"]}"',
        )
    if spec.get("schedulingGates"):
        raise conflict("", "pods/binding", name, f"pod {name} has non-empty .spec.schedulingGates")
    bound = deep_copy(pod)
    bound["spec"]["nodeName"] = node
    status = bound.setdefault("status", {})
    status.pop("nominatedNodeName", None)
    for field in ("annotations", "labels"):
        extra = string_map(binding_meta.get(field))
        if extra:
            meta(bound).setdefault(field, {}).update(extra)
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    now = timestamp(api.clock())
    conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now})
    status["conditions"] = conditions
    api.store.put(pods, bound, pod)
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
