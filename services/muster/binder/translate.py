"""What the binder asks of the cluster: an admitted workload's pods, from its spec and admission.

Pure: `pod_set_starts` combines the Workload (from `workload.submitted`, or the copy its
`admitted` carries) with `WorkloadAdmitted` (counts per podset, and the node labels and
tolerations its flavors inject).
"""

from __future__ import annotations

from typing import Literal, cast

from muster.api import parse_quantity
from muster.api.model import PodSet, Toleration, Workload
from muster.api.podspec import AdmittedCountError, admitted_pod_set
from muster.cluster.backend import PodSetStart
from muster.contracts.v1 import events_pb2
from muster.payloads import written_workload


class AdmissionMismatchError(ValueError):
    """The admission does not fit the workload: it names a podset the workload does not
    have, admits more pods than a podset has, or routes it to requests that do not parse."""


def workload_from_submitted(payload: events_pb2.WorkloadSubmitted, *, what: str) -> Workload:
    """The Workload in `workload.submitted`'s manifest; PayloadError naming `what` (the
    workload's key) when it does not decode."""
    return written_workload(payload.manifest_json, what=what)


def _toleration(t: events_pb2.Toleration) -> Toleration:
    operator = cast(Literal["Equal", "Exists"], t.operator if t.operator == "Exists" else "Equal")
    return Toleration(key=t.key, operator=operator, value=t.value, effect=t.effect)


def pod_set_starts(wl: Workload, admitted: events_pb2.WorkloadAdmitted) -> list[PodSetStart]:
    """One PodSetStart per admitted podset, in the admission's order.

    Count from the admission (partial admission may have shrunk it); requests, node selector,
    tolerations and annotations from the podset, with the flavor's node labels and
    tolerations added; `muster.dev/run-seconds` from the workload when the podset lacks it.
    Raises AdmissionMismatchError when the admission names a podset the workload lacks, or does
    not fit it otherwise (a count outside the podset's, requests that do not parse).
    """
    pod_sets = {ps.name: ps for ps in wl.pod_sets}
    hints = {h.name: h for h in admitted.hints}
    out = []
    for assignment in admitted.admission.pod_set_assignments:
        ps = pod_sets.get(assignment.name)
        if ps is None:
            raise AdmissionMismatchError(
                f"admission of {wl.key} names podset {assignment.name!r}, "
                f"which the workload does not have ({', '.join(sorted(pod_sets)) or 'none'})"
            )
        try:
            out.append(_start(wl, ps, assignment.count, hints.get(ps.name)))
        except AdmittedCountError as err:
            raise AdmissionMismatchError(str(err)) from None
        except ValueError as err:  # QuantityError: a routed alternative's requests
            raise AdmissionMismatchError(
                f"admission of {wl.key}: podset {ps.name!r}: routed requests: {err}"
            ) from None
    return out


def _start(
    wl: Workload, ps: PodSet, count: int, hint: events_pb2.PodSetPlacementHints | None
) -> PodSetStart:
    admitted = admitted_pod_set(
        wl,
        ps,
        count=count,
        node_labels=hint.node_selector if hint is not None else {},
        tolerations=map(_toleration, hint.tolerations) if hint is not None else (),
    )
    requests = dict(admitted.requests)
    annotations = dict(admitted.annotations)
    if hint is not None:
        if hint.requests:  # routed to an alternative (docs/routing.md): its requests replace
            requests = {name: parse_quantity(q) for name, q in hint.requests.items()}
        annotations.update(hint.annotations)  # its muster.dev/run-seconds there
    return PodSetStart(
        name=admitted.name,
        count=admitted.count,
        requests=requests,
        node_selector=admitted.node_selector,
        tolerations=admitted.tolerations,
        annotations=annotations,
    )
