"""The API server's RuntimeClass admission plugin on new pods (plugin/pkg/admission/runtimeclass
in Kubernetes), as the stand-in applies it:

- A pod naming a RuntimeClass that does not exist is refused with 403 Forbidden.
- Mutation: the RuntimeClass's `overhead.podFixed` becomes the pod's `spec.overhead` (refused
  when the pod sets a different one); its `scheduling.nodeSelector` is merged into the pod's
  (refused on a conflicting value) and its `scheduling.tolerations` added when not there.
- Validation: a pod with an overhead and no RuntimeClass overhead to match it is refused.

Messages are Kubernetes' own. The stand-in stands alone, so quantities are compared with the
LimitRanger's reading of them (exactly, as decimals).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from muster.devtools.apiserver.errors import forbidden_request
from muster.devtools.apiserver.limit_ranger import amounts
from muster.devtools.apiserver.objects import JsonObj, meta, name_of


def admit_runtime_class(pod: JsonObj, runtime_class: Callable[[str], JsonObj | None]) -> None:
    """Apply the RuntimeClass `pod` names (looked up with `runtime_class`) to it; raises
    ApiError 403 when the API server would refuse it."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    name = spec.get("runtimeClassName")
    found = runtime_class(name) if isinstance(name, str) and name else None
    if name and found is None:
        _refuse(pod, f'pod rejected: RuntimeClass "{name}" not found')
    overhead = (found or {}).get("overhead")
    pod_fixed = overhead.get("podFixed") if isinstance(overhead, dict) else None
    written = spec.get("overhead")
    if isinstance(overhead, dict):
        if written and not _same(written, pod_fixed):
            _refuse(
                pod, "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
            )
        if pod_fixed:
            spec["overhead"] = dict(pod_fixed)
    elif written:
        _refuse(
            pod,
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        )
    if found is not None:
        _schedule(pod, spec, found.get("scheduling"))


def _schedule(pod: JsonObj, spec: JsonObj, scheduling: Any) -> None:
    if not isinstance(scheduling, dict):
        return
    selector = dict(spec.get("nodeSelector") or {})
    for key, value in (scheduling.get("nodeSelector") or {}).items():
        if key in selector and selector[key] != value:
            _refuse(
                pod,
                f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                f"pod.spec.nodeSelector[{key}] = {selector[key]}",
            )
        selector[key] = value
    if selector:
        spec["nodeSelector"] = selector
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [t for t in scheduling.get("tolerations") or [] if t not in tolerations]
    if tolerations:
        spec["tolerations"] = tolerations


def _same(a: Any, b: Any) -> bool:
    """Semantic equality of two resource lists: the same resources, the same amounts."""
    mine, theirs = amounts(a), amounts(b)
    return {r: v for r, (v, _) in mine.items()} == {r: v for r, (v, _) in theirs.items()}


def _refuse(pod: JsonObj, said: str) -> None:
    # Admission runs before a name is made from generateName, so that is the one said.
    name = meta(pod).get("generateName") or name_of(pod)
    raise forbidden_request(
        f'pods "{name}" is forbidden: {said}', details={"name": name, "kind": "pods"}
    )
