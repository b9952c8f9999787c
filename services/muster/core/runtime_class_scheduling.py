"""Where a pod naming a RuntimeClass may run: the RuntimeClass's `scheduling` merged into the
pod, as the API server's RuntimeClass admission does on a new pod (its setScheduling).

The RuntimeClass's nodeSelector is added to the pod's, and the pod refused when it sets one of
those keys to another value; its tolerations are added unless the pod has them already. Pure:
the simulated API server (`muster.cluster.sim.backend`) applies it to every new pod naming a
RuntimeClass, as the stand-in API server does on Kubernetes' behalf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from muster.api.model import RuntimeClass, Toleration


class Scheduling(msgspec.Struct, frozen=True, kw_only=True):
    """A pod's nodeSelector with its RuntimeClass's merged in, and the RuntimeClass's
    tolerations it lacks (to append to its own, in this order)."""

    node_selector: dict[str, str]
    added_tolerations: tuple[Toleration, ...]


def merged_scheduling(
    node_selector: Mapping[str, str], tolerations: Sequence[Toleration], found: RuntimeClass
) -> Scheduling | str:
    """The scheduling of a new pod (`node_selector`, `tolerations`) that names `found`, or
    why the API server refuses it, in Kubernetes' words (the 403's reason after
    `pods "<name>" is forbidden: `). Keys are compared in name order, so the conflict named
    is always the same one (Kubernetes walks a Go map)."""
    merged = dict(node_selector)
    for key, value in sorted(found.node_selector.items()):
        if key in merged and merged[key] != value:
            return (
                f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                f"pod.spec.nodeSelector[{key}] = {merged[key]}"
            )
        merged[key] = value
    added: list[Toleration] = []
    for toleration in found.tolerations:
        if toleration not in tolerations and toleration not in added:
            added.append(toleration)
    return Scheduling(node_selector=merged, added_tolerations=tuple(added))
