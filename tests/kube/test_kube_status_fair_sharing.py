"""LocalQueue `status.fairSharing.admissionFairSharingStatus` as the watcher writes it when
Kueue's Configuration has `admissionFairSharing`: the usage admission orders by, as of the last
event that started or ended one of the LocalQueue's workloads' runs."""

from __future__ import annotations

import json
from typing import Any

from muster.api.model import AdmissionFairSharingConfig
from muster.bus import new_event
from muster.cluster.kube import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.kueue_status import StatusBook

FAIR = AdmissionFairSharingConfig(usage_half_life_s=600.0, usage_sampling_interval_s=300.0)


def at(field: str, payload: Any, *, s: float, workload: str = "") -> pb.Envelope:
    return new_event(
        field, payload, cluster="local", workload=workload, source="test", now_ns=int(s * 1e9)
    )


def applied(kind: str, name: str, spec: dict[str, Any], *, s: float = 1.0) -> pb.Envelope:
    manifest = json.dumps({"kind": kind, "spec": spec})
    return at("config_applied", pb.ConfigApplied(kind=kind, name=name, manifest_json=manifest), s=s)


def reserved(cpu: str) -> pb.QuotaReserved:
    assignment = pb.PodSetAssignment(
        name="main", flavors={"cpu": "default"}, count=1, resource_usage={"cpu": cpu}
    )
    return pb.QuotaReserved(
        admission=pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    )


def book(fair: AdmissionFairSharingConfig | None) -> StatusBook:
    """Team a ran 2 cpu from 100 s to 700 s; team b's LocalQueue (applied at 50 s) ran nothing."""
    made = StatusBook(kueue_version="v1beta2", fair=fair)
    for env in (
        applied("ClusterQueue", "cq", {}),
        applied("LocalQueue", "ml/a", {"clusterQueue": "cq"}),
        applied("LocalQueue", "ml/b", {"clusterQueue": "cq"}, s=50.0),
        at("submitted", pb.WorkloadSubmitted(queue_name="a"), s=90.0, workload="ml/a1"),
        at("quota_reserved", reserved("2"), s=100.0, workload="ml/a1"),
        at("finished", pb.WorkloadFinished(), s=700.0, workload="ml/a1"),
    ):
        made.apply(env)
    return made


def fair_sharing(made: StatusBook, name: str) -> Any:
    status = made.status_of(ObjectRef(kind="LocalQueue", namespace="ml", name=name)) or {}
    return status.get("fairSharing")


def test_a_local_queue_shows_its_decayed_usage_as_of_its_last_run_change() -> None:
    made = book(FAIR)
    # 600 s (one half-life) of 2 cpu: 1 core reached, plus the entry penalty
    # 2 x (1 - 0.5 ** (300 / 600)) = 0.586 at the start, halved since: 1.293 cores.
    assert fair_sharing(made, "a") == {
        "admissionFairSharingStatus": {
            "consumedResources": {"cpu": "1293m"},
            "lastUpdate": "1970-01-01T00:11:40Z",
        }
    }
    assert fair_sharing(made, "b") == {
        "admissionFairSharingStatus": {
            "consumedResources": {},
            "lastUpdate": "1970-01-01T00:00:50Z",
        }
    }


def test_without_admission_fair_sharing_no_fair_sharing_status_is_written() -> None:
    assert fair_sharing(book(None), "a") is None
