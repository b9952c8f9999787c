"""A model `Admission` and its protobuf form, both ways, and the placement hints an `admitted`
carries per podset; `PayloadParts`, both built once per admission's shape. Pure.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import TypeVar

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

# An admission as a key (its podsets' names, flavors, counts and usage, in their order): what
# its protobuf form and, with the flavors it names, its placement hints follow from.
_Shape = tuple[
    str, tuple[tuple[str, tuple[tuple[str, str], ...], int, tuple[tuple[str, int], ...]], ...]
]
_Flavors = tuple[ResourceFlavor | None, ...]
_T = TypeVar("_T")


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


class PayloadParts:
    """The parts of `quota_reserved` and `admitted` payloads that follow from the admission and
    its flavors alone (`admission_to_proto`, `placement_hints`), built once per admission shape
    and copied into each payload: workloads of one ClusterQueue and template share them, and
    building them was most of translating an admission (issue 19, docs/benchmarks.md).

    A shape's hints are used again only while the flavors it names are the very objects they
    were built from (a ResourceFlavor applied again is a new object). The oldest shape is
    dropped past `limit`.
    """

    def __init__(self, limit: int = 1024) -> None:
        self._limit = limit
        self._admissions: dict[_Shape, pb.Admission] = {}
        self._admitted: dict[_Shape, tuple[_Flavors, pb.WorkloadAdmitted]] = {}

    def quota_reserved(self, admission: Admission, checks: Sequence[str]) -> pb.QuotaReserved:
        shape = _shape(admission)
        built = self._admissions.get(shape)
        if built is None:
            built = self._admissions[shape] = admission_to_proto(admission)
            _bound(self._admissions, self._limit)
        payload = pb.QuotaReserved(admission_checks=checks)
        payload.admission.CopyFrom(built)
        return payload

    def admitted(
        self,
        admission: Admission,
        flavors: Mapping[str, ResourceFlavor],
        route: WorkloadRoute | None = None,
    ) -> pb.WorkloadAdmitted:
        """A new `admitted` payload with `admission` and its placement hints; the caller sets
        the rest. A routed workload's hints carry its own requests: built for it alone."""
        if route is not None and route.away:
            return pb.WorkloadAdmitted(
                admission=admission_to_proto(admission),
                hints=placement_hints(admission, flavors, route),
            )
        shape = _shape(admission)
        named = tuple(
            [flavors.get(f) for ps in admission.pod_set_assignments for f in ps.flavors.values()]
        )
        kept = self._admitted.get(shape)
        # One shape names its flavors in one order: the same objects, in place, or not.
        if kept is None or not all(map(operator.is_, kept[0], named)):
            built = pb.WorkloadAdmitted(
                admission=admission_to_proto(admission), hints=placement_hints(admission, flavors)
            )
            kept = self._admitted[shape] = (named, built)
            _bound(self._admitted, self._limit)
        payload = pb.WorkloadAdmitted()
        payload.CopyFrom(kept[1])
        return payload


def _shape(admission: Admission) -> _Shape:
    return (
        admission.cluster_queue,
        tuple(
            [
                (ps.name, tuple(ps.flavors.items()), ps.count, tuple(ps.resource_usage.items()))
                for ps in admission.pod_set_assignments
            ]
        ),
    )


def _bound(kept: dict[_Shape, _T], limit: int) -> None:
    """Drop the oldest of `kept` past `limit`."""
    while len(kept) > limit:
        del kept[next(iter(kept))]
