"""What gang-permit reads of a Kueue workload's `submitted` and `admitted`: its spec, priority
and creation time, and the admission as the api model spells it. Pure."""

from __future__ import annotations

import logging

import msgspec

from muster.api.model import Admission, PodSetAssignment, Workload
from muster.contracts.v1 import events_pb2
from muster.payloads import PayloadError, written_workload

log = logging.getLogger(__name__)


class Submitted(msgspec.Struct, frozen=True, kw_only=True):
    workload: Workload | None  # None when the manifest does not decode
    priority: int
    created_s: float


def submitted_of(env: events_pb2.Envelope) -> Submitted:
    """What a `submitted` says."""
    return Submitted(
        workload=_workload_of(env.submitted.manifest_json, env),
        priority=env.submitted.priority,
        created_s=env.time_unix_nano / 1e9,
    )


def submitted_from(manifest_json: str, admitted: events_pb2.Envelope) -> Submitted:
    """What a `submitted` would have said, from the copy of the manifest an admission carries
    (its priority as written in it; its creation time unknown, so the admission's)."""
    workload = _workload_of(manifest_json, admitted)
    return Submitted(
        workload=workload,
        priority=(workload.priority or 0) if workload is not None else 0,
        created_s=admitted.time_unix_nano / 1e9,
    )


def _workload_of(manifest_json: str, env: events_pb2.Envelope) -> Workload | None:
    try:
        return written_workload(manifest_json, what=env.workload)
    except PayloadError as err:
        log.warning("undecodable workload manifest: %s", err, extra={"workload": env.workload})
        return None


def admission_of(admission: events_pb2.Admission) -> Admission:
    """The admission as the api model spells it (usage left out: placement does not read it)."""
    return Admission(
        cluster_queue=admission.cluster_queue,
        pod_set_assignments=tuple(
            PodSetAssignment(name=a.name, flavors=dict(a.flavors), count=a.count, resource_usage={})
            for a in admission.pod_set_assignments
        ),
    )
