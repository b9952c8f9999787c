"""What admission check controllers ask to be set on a workload's pods, merged into how the
binder starts them, as Kueue's job framework does at start. Both backends merge them: the
Kubernetes one from the Workload in the API server, the simulated one from the Workload in its
store.

A controller answering Ready may list `podSetUpdates` in its entry of the Workload's
`status.admissionChecks` (labels, annotations, nodeSelector, tolerations per podset): the
ProvisioningRequest check names the request the pods are to consume this way. They are read
from the Kueue Workload when the workload starts, so they are the controller's latest words
whatever restarted meanwhile. They go over what the pod template sets (where Kueue would call
a changed value a conflict and fail the workload, docs/kueue-compatibility.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from muster.api.model import Toleration
from muster.cluster.backend import PodSetStart

_MAPS = (("labels", "labels"), ("annotations", "annotations"), ("nodeSelector", "node_selector"))
_TOLERATION_FIELDS = ("key", "operator", "value", "effect")


def with_check_updates(
    starts: Sequence[PodSetStart], workload: Mapping[str, Any] | None
) -> list[PodSetStart]:
    """`starts` with the Ready checks' podSetUpdates of Kueue Workload `workload` merged in."""
    out = list(starts)
    for update in _updates(workload):
        out = [_merged(s, update) if update.get("name") == s.name else s for s in out]
    return out


def _updates(workload: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    status = (workload or {}).get("status")
    entries = status.get("admissionChecks") if isinstance(status, dict) else None
    return [
        update
        for entry in _dicts(entries)
        if entry.get("state") == "Ready"
        for update in _dicts(entry.get("podSetUpdates"))
    ]


def _merged(start: PodSetStart, update: Mapping[str, Any]) -> PodSetStart:
    changes: dict[str, Any] = {
        attr: {**getattr(start, attr), **wanted}
        for field, attr in _MAPS
        if (wanted := _string_map(update.get(field)))
    }
    tolerations = list(start.tolerations)
    for t in map(_toleration, _dicts(update.get("tolerations"))):
        if t is not None and t not in tolerations:
            tolerations.append(t)
    if len(tolerations) != len(start.tolerations):
        changes["tolerations"] = tuple(tolerations)
    return msgspec.structs.replace(start, **changes) if changes else start


def _string_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if isinstance(v, str)}


def _dicts(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _toleration(obj: Mapping[str, Any]) -> Toleration | None:
    fields = {f: obj[f] for f in _TOLERATION_FIELDS if isinstance(obj.get(f), str)}
    try:
        return msgspec.convert(fields, Toleration)
    except msgspec.ValidationError:
        return None
