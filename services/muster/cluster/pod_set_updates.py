"""What admission check controllers ask to be set on a workload's pods, merged into how the
binder starts them, as Kueue's job framework does at start. Both backends merge them: the
Kubernetes one from the Workload in the API server, the simulated one from the Workload in its
store.

The Ready entries' `podSetUpdates` (`muster.api.pod_set_updates`) are read from the Kueue
Workload when the workload starts, so they are the controller's latest words whatever
restarted meanwhile. One that sets a label, annotation or nodeSelector key the pods already
have (from the template, the flavors, muster's own or an earlier check) to another value is
Kueue's conflict: the workload fails to start (`PodSetUpdateConflictError`), nothing is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from muster.api.pod_set_updates import (
    PodSetUpdate,
    merged_tolerations,
    ready_updates_of,
    start_conflict,
    template_labels,
)
from muster.cluster.backend import PodSetStart
from muster.cluster.errors import PodSetUpdateConflictError

_MAPS = ("labels", "annotations", "node_selector")


def with_check_updates(
    starts: Sequence[PodSetStart],
    workload: Mapping[str, Any] | None,
    *,
    what: str = "",
    owner: Mapping[str, Any] | None = None,
) -> list[PodSetStart]:
    """`starts` with the Ready checks' podSetUpdates of Kueue Workload `workload` merged in.
    Raises PodSetUpdateConflictError (naming workload `what`, its key) for Kueue's conflict,
    with the labels of `owner`'s pod templates too (the Job or JobSet it stands for, or the
    Workload itself, as stored: `template_labels`): its pods carry them."""
    updates = ready_updates_of(workload)
    if not updates:
        return list(starts)
    labels = template_labels(owner if owner is not None else workload)
    pods = {
        s.name: ({**labels.get(s.name, {}), **s.labels}, s.annotations, s.node_selector)
        for s in starts
    }
    conflict = start_conflict(pods, updates, workload=what.rpartition("/")[2])
    if conflict is not None:
        raise PodSetUpdateConflictError(f"Workload/{what}" if what else "", conflict)
    out = list(starts)
    for update in updates:
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
