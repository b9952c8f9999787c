"""An admitted workload's podsets as its pods are made: its Workload (from `submitted`, or the
copy its `admitted` carries) combined with `WorkloadAdmitted` (counts per podset; the node
labels, tolerations, routed requests and annotations its flavors put on the pods).

Shared by the binder, which creates the pods, and gang-permit, which places the pods the binder
will create before they exist (docs/events.md, "Pods created on their nodes"): both read one
admission alike. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast

import msgspec

from muster.api import parse_quantity
from muster.api.model import OwnerReference, PodSet, Toleration, Workload
from muster.api.podspec import AdmittedCountError, admitted_pod_set
from muster.contracts.v1 import events_pb2


class AdmissionMismatchError(ValueError):
    """The admission does not fit the workload: it names a podset the workload does not
    have, admits more pods than a podset has, or routes it to requests that do not parse."""


def admitted_pod_sets(wl: Workload, admitted: events_pb2.WorkloadAdmitted) -> list[PodSet]:
    """Each admitted podset of `wl`, in the admission's order, as its pods are made.

    Count from the admission (partial admission may have shrunk it); requests, node selector,
    tolerations and annotations from the podset, with the flavor's node labels and
    tolerations added, and a routed alternative's requests and annotations in place of the
    podset's; `muster.dev/run-seconds` from the workload when the podset lacks it. Raises
    AdmissionMismatchError when the admission names a podset the workload lacks, or does not
    fit it otherwise (a count outside the podset's, requests that do not parse).
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
            out.append(_admitted(wl, ps, assignment.count, hints.get(ps.name)))
        except AdmittedCountError as err:
            raise AdmissionMismatchError(str(err)) from None
        except ValueError as err:  # QuantityError: a routed alternative's requests
            raise AdmissionMismatchError(
                f"admission of {wl.key}: podset {ps.name!r}: routed requests: {err}"
            ) from None
    return out


def _admitted(
    wl: Workload, ps: PodSet, count: int, hint: events_pb2.PodSetPlacementHints | None
) -> PodSet:
    admitted = admitted_pod_set(
        wl,
        ps,
        count=count,
        node_labels=hint.node_selector if hint is not None else {},
        tolerations=map(_toleration, hint.tolerations) if hint is not None else (),
    )
    if hint is None:
        return admitted
    requests = dict(admitted.requests)
    if hint.requests:  # routed to an alternative (docs/routing.md): its requests replace
        requests = {name: parse_quantity(q) for name, q in hint.requests.items()}
    annotations = {**admitted.annotations, **hint.annotations}  # its muster.dev/run-seconds
    return msgspec.structs.replace(admitted, requests=requests, annotations=annotations)


def _toleration(t: events_pb2.Toleration) -> Toleration:
    operator = cast(Literal["Equal", "Exists"], t.operator if t.operator == "Exists" else "Equal")
    return Toleration(key=t.key, operator=operator, value=t.value, effect=t.effect)


def owner_kind(wl: Workload) -> str:
    """The kind of what `wl` stands for ("" for none): its controller, else a lone owner as
    written (as `workload.submitted`'s `owner` names it)."""
    refs: tuple[OwnerReference, ...] = tuple(wl.meta.owner_references)
    ref = next((r for r in refs if r.controller), refs[0] if refs else None)
    return ref.kind if ref is not None else ""


def created_on_nodes(
    admitted: events_pb2.WorkloadAdmitted,
    wl: Workload,
    *,
    cluster: str,
    creates_on_nodes: Callable[[str], bool],
) -> bool:
    """Whether the binder creates the pods of admission `admitted` (of `wl`) each on its node
    at the gang's `gang_permitted`, gang-permit placing them before they exist, rather than
    unbound at `admitted` (docs/events.md, "Pods created on their nodes").

    Yes when the workload was submitted in `cluster` (not a MultiKueue copy), the admission
    carries its manifest (a workload over 256 KiB does not: its `submitted` may have left the
    stream before the one or the other replayed it, and then could not build its pods), and
    the cluster's binder makes the pods of what it stands for (`creates_on_nodes`, by the
    kind of its owner), and it was admitted with its reservation: one admitted after its
    admission checks is created unbound, because its Ready checks' podSetUpdates (a
    nodeSelector, tolerations) are read from the Kueue Workload as the binder starts it and
    must steer where its pods go, as they steer kube-scheduler after Kueue starts the job;
    gang-permit then places the pods as made. Decided from the `admitted` alone, so the binder
    and gang-permit agree whatever each replayed: `wl` is its copy, or the `submitted` it
    copies.
    """
    return (
        admitted.with_reservation
        and admitted.origin_cluster in ("", cluster)
        and bool(admitted.manifest_json)
        and creates_on_nodes(owner_kind(wl))
    )
