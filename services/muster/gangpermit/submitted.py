"""What gang-permit reads of a Kueue workload's `submitted` and `admitted`: its spec, priority
and creation time, the admission as the api model spells it, and the gang held for it
(`KueueGang`). Pure."""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from muster.api.model import Admission, PodSetAssignment, Workload
from muster.contracts.v1 import events_pb2
from muster.core.placement.model import GangSpec
from muster.payloads import KeptManifest


class Submitted(NamedTuple):
    manifest: KeptManifest  # decoded once it is admitted here
    priority: int
    created_s: float

    @property
    def workload(self) -> Workload | None:
        """Its Workload; None when the manifest does not decode."""
        return self.manifest.workload()


def submitted_of(env: events_pb2.Envelope) -> Submitted:
    """What a `submitted` says (its manifest read only when asked for)."""
    return Submitted(
        manifest=KeptManifest(env.submitted.manifest_json, what=env.workload),
        priority=env.submitted.priority,
        created_s=env.time_unix_nano / 1e9,
    )


def submitted_from(manifest_json: str, admitted: events_pb2.Envelope) -> Submitted:
    """What a `submitted` would have said, from the copy of the manifest an admission carries
    (its priority as written in it; its creation time unknown, so the admission's)."""
    manifest = KeptManifest(manifest_json, what=admitted.workload)
    workload = manifest.workload()
    return Submitted(
        manifest=manifest,
        priority=(workload.priority or 0) if workload is not None else 0,
        created_s=admitted.time_unix_nano / 1e9,
    )


def admission_of(admission: events_pb2.Admission) -> Admission:
    """The admission as the api model spells it (usage left out: placement does not read it)."""
    return Admission(
        cluster_queue=admission.cluster_queue,
        pod_set_assignments=tuple(
            PodSetAssignment(name=a.name, flavors=dict(a.flavors), count=a.count, resource_usage={})
            for a in admission.pod_set_assignments
        ),
    )


class KueueGang(msgspec.Struct, kw_only=True):
    """A Kueue-admitted workload's gang, and the `admitted` event its decisions are caused by."""

    spec: GangSpec
    admitted: events_pb2.Envelope
