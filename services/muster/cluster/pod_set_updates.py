"""What admission check controllers ask to be set on a workload's pods, merged into how the
binder starts them, as Kueue's job framework does at start. Both backends merge them: the
Kubernetes one from the Workload in the API server, the simulated one from the Workload in its
store.

The Ready entries' `podSetUpdates` (`muster.api.pod_set_updates`) are read from the Kueue
Workload when the workload starts, so they are the controller's latest words whatever
restarted meanwhile. They go over what the pod template sets (where Kueue would call a changed
value a conflict and fail the workload, docs/kueue-compatibility.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from muster.api.pod_set_updates import PodSetUpdate, merged_tolerations, ready_updates_of
from muster.cluster.backend import PodSetStart

_MAPS = ("labels", "annotations", "node_selector")


def with_check_updates(
    starts: Sequence[PodSetStart], workload: Mapping[str, Any] | None
) -> list[PodSetStart]:
    """`starts` with the Ready checks' podSetUpdates of Kueue Workload `workload` merged in."""
    out = list(starts)
    for update in ready_updates_of(workload):
        out = [_merged(s, update) if update.name == s.name else s for s in out]
    return out


def _merged(start: PodSetStart, update: PodSetUpdate) -> PodSetStart:
    changes: dict[str, Any] = {
        attr: {**getattr(start, attr), **wanted}
        for attr in _MAPS
        if (wanted := getattr(update, attr))
    }
    tolerations = merged_tolerations(start.tolerations, update.tolerations)
    if tolerations != start.tolerations:
        changes["tolerations"] = tolerations
    return msgspec.structs.replace(start, **changes) if changes else start
