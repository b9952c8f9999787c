"""Admission fair sharing in the admission service: simulate-only for now.

A replica rebuilt from a snapshot does not know the usage of workloads that finished before
the snapshot (it keeps only live workloads' events), so ordering by it would make a rebuilt
replica decide otherwise than the live one. Until the usage is carried in snapshots, the service
orders a ClusterQueue with `admissionScope` by priority and time, live and rebuilt alike
(docs/kueue-compatibility.md, "Admission fair sharing").
"""

from __future__ import annotations

from typing import Any

import admission_stream as kit

from muster.admission.state import AdmissionState
from muster.api.model import AdmissionFairSharingConfig, KueueConfig
from muster.contracts.v1 import events_pb2 as pb

FAIR = KueueConfig(admission_fair_sharing=AdmissionFairSharingConfig(usage_half_life_s=600.0))


def shared_queue() -> dict[str, Any]:
    cq = kit.cluster_queue(cpu="2")
    cq["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    return cq


def admitted(envs: list[pb.Envelope]) -> list[str]:
    return [e.workload for e in envs if e.WhichOneof("payload") == "admitted"]


def test_a_rebuilt_replica_orders_a_shared_cluster_queue_as_the_live_one() -> None:
    stream, live = kit.Stream(), AdmissionState(kueue=FAIR)
    live.take_ownership(now_s=0.0)
    for manifest in (kit.flavor(), shared_queue(), kit.local_queue("a"), kit.local_queue("b")):
        stream.run(live, kit.applied(manifest))
    for name in ("a1", "a2", "a3"):
        stream.run(live, kit.submitted(kit.workload(name, queue="a"), at_s=1.0), now_s=1.0)
    stream.run(live, kit.submitted(kit.workload("b1", queue="b"), at_s=2.0), now_s=2.0)

    # Services: priority and time only, so the flood's next goes first.
    assert admitted(
        stream.run(live, kit.reported("finished", "ns/a1", at_s=100.0), now_s=100.0)
    ) == ["ns/a3"]

    rebuilt = stream.rebuild(kueue=FAIR)
    assert rebuilt.take_ownership(now_s=150.0) == []  # everything was decided already
    done = kit.reported("finished", "ns/a2", at_s=200.0)
    assert admitted(stream.run(live, done, now_s=200.0, publish=False)) == ["ns/b1"]
    assert admitted(kit.Stream().run(rebuilt, done, now_s=200.0, publish=False)) == ["ns/b1"]
