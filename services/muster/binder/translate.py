"""What the binder asks of the cluster: an admitted workload's pods, from its spec and admission.

Pure: `pod_set_starts` combines the Workload (from `workload.submitted`, or the copy its
`admitted` carries) with `WorkloadAdmitted` (counts per podset, and the node labels and
tolerations its flavors inject).
"""

from __future__ import annotations

from muster.admitted_podsets import AdmissionMismatchError as AdmissionMismatchError
from muster.admitted_podsets import admitted_pod_sets
from muster.api.model import Workload
from muster.cluster.backend import PodSetStart
from muster.contracts.v1 import events_pb2
from muster.payloads import written_workload


def workload_from_submitted(payload: events_pb2.WorkloadSubmitted, *, what: str) -> Workload:
    """The Workload in `workload.submitted`'s manifest; PayloadError naming `what` (the
    workload's key) when it does not decode."""
    return written_workload(payload.manifest_json, what=what)


def pod_set_starts(wl: Workload, admitted: events_pb2.WorkloadAdmitted) -> list[PodSetStart]:
    """One PodSetStart per admitted podset, in the admission's order
    (`muster.admitted_podsets.admitted_pod_sets`: AdmissionMismatchError when the admission
    does not fit the workload). A podset whose hint carries requests was routed."""
    routed = {hint.name for hint in admitted.hints if hint.requests}
    return [
        PodSetStart(
            name=ps.name,
            count=ps.count,
            requests=dict(ps.requests),
            node_selector=ps.node_selector,
            tolerations=ps.tolerations,
            annotations=dict(ps.annotations),
            routed=ps.name in routed,
        )
        for ps in admitted_pod_sets(wl, admitted)
    ]
