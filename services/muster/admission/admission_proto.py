"""A model `Admission` and its protobuf form, both ways, and the placement hints an `admitted`
carries per podset. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from muster.admission.facts import FactError
from muster.admission.routing import WorkloadRoute
from muster.api import parse_quantity, quantities_to_strings
from muster.api.model import (
    Admission,
    PodSetAssignment,
    ResourceFlavor,
)
from muster.api.podspec import flavor_placement
from muster.api.wellknown import RUN_SECONDS_ANNOTATION
from muster.contracts.v1 import events_pb2 as pb


def admission_to_proto(admission: Admission) -> pb.Admission:
    return pb.Admission(
        cluster_queue=admission.cluster_queue,
        pod_set_assignments=[
            pb.PodSetAssignment(
                name=ps.name,
                flavors=dict(ps.flavors),
                count=ps.count,
                resource_usage=quantities_to_strings(ps.resource_usage),
            )
            for ps in admission.pod_set_assignments
        ],
    )


def admission_from_proto(admission: pb.Admission) -> Admission:
    """The model admission of a recorded quota_reserved; raises FactError on a bad quantity."""
    try:
        return Admission(
            cluster_queue=admission.cluster_queue,
            pod_set_assignments=tuple(
                PodSetAssignment(
                    name=ps.name,
                    flavors=dict(ps.flavors),
                    count=ps.count,
                    resource_usage={r: parse_quantity(q) for r, q in ps.resource_usage.items()},
                )
                for ps in admission.pod_set_assignments
            ),
        )
    except ValueError as exc:
        raise FactError(f"admission of {admission.cluster_queue}: {exc}") from exc


def placement_hints(
    admission: Admission, flavors: Mapping[str, ResourceFlavor], route: WorkloadRoute | None = None
) -> list[pb.PodSetPlacementHints]:
    """Per podset, the node labels and tolerations its assigned flavors put on its pods; for a
    workload routed to an alternative, also the requests and run time it has there."""
    away = route if route is not None and route.away else None
    routed = {ps.name: ps for ps in away.pod_sets} if away is not None else {}
    hints = []
    for ps in admission.pod_set_assignments:
        selector, tolerations = flavor_placement(ps.flavors.values(), flavors)
        hint = pb.PodSetPlacementHints(
            name=ps.name,
            node_selector=selector,
            tolerations=[
                pb.Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect)
                for t in tolerations
            ],
        )
        if away is not None and ps.name in routed:
            hint.requests.update(quantities_to_strings(routed[ps.name].requests))
            if away.run_s is not None:
                hint.annotations[RUN_SECONDS_ANNOTATION] = f"{away.run_s:g}"
        hints.append(hint)
    return hints
