"""LocalQueue `status.fairSharing.admissionFairSharingStatus` as the watcher writes it when
Kueue's Configuration has `admissionFairSharing`: the usage admission orders by, as of the last
event that started or ended one of the LocalQueue's workloads' runs, re-sampled every
`usageSamplingInterval` as Kueue's LocalQueue controller does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from muster.api.model import AdmissionFairSharingConfig
from muster.bus import new_event
from muster.cluster.kube import ObjectRef
from muster.contracts.v1 import events_pb2 as pb
from muster.watcher.kueue_status.book import StatusBook
from muster.watcher.status import sample_fair_sharing

FAIR = AdmissionFairSharingConfig(usage_half_life_s=600.0, usage_sampling_interval_s=300.0)


def at(field: str, payload: Any, *, s: float, workload: str = "") -> pb.Envelope:
    return new_event(
        field, payload, cluster="local", workload=workload, source="test", now_ns=int(s * 1e9)
    )


def applied(kind: str, name: str, spec: dict[str, Any], *, s: float = 1.0) -> pb.Envelope:
    manifest = json.dumps({"kind": kind, "spec": spec})
    return at("config_applied", pb.ConfigApplied(kind=kind, name=name, manifest_json=manifest), s=s)


def reserved(cpu: str, *, count: int = 1) -> pb.QuotaReserved:
    assignment = pb.PodSetAssignment(
        name="main", flavors={"cpu": "default"}, count=count, resource_usage={"cpu": cpu}
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


def test_a_sample_writes_the_usage_decayed_to_the_intervals_tick_once_per_interval() -> None:
    made = book(FAIR)
    a = ObjectRef(kind="LocalQueue", namespace="ml", name="a")
    # At 1000 s the last tick of the 300 s grid is 900 s: 200 s more of decay since 700 s.
    # Team b consumed nothing and showed nothing: no write for it.
    assert made.sample(1000.0) == {a}
    assert fair_sharing(made, "a") == {
        "admissionFairSharingStatus": {
            "consumedResources": {"cpu": "1026m"},
            "lastUpdate": "1970-01-01T00:15:00Z",
        }
    }
    assert made.sample(1199.0) == set()  # the same interval: sampled already
    assert made.sample(1200.0) == {a}
    assert fair_sharing(made, "a")["admissionFairSharingStatus"]["lastUpdate"] == (
        "1970-01-01T00:20:00Z"
    )


def test_a_sample_skips_an_interval_whose_tick_a_later_run_change_already_covers() -> None:
    made = book(FAIR)
    made.apply(at("submitted", pb.WorkloadSubmitted(queue_name="a"), s=950.0, workload="ml/a2"))
    made.apply(at("quota_reserved", reserved("1"), s=960.0, workload="ml/a2"))
    assert made.sample(1000.0) == set()  # its status is as of 960 s, after the 900 s tick
    assert fair_sharing(made, "a")["admissionFairSharingStatus"]["lastUpdate"] == (
        "1970-01-01T00:16:00Z"
    )


def test_a_local_queue_without_its_cluster_queue_is_not_sampled() -> None:
    made = book(FAIR)
    made.apply(at("config_deleted", pb.ConfigDeleted(kind="ClusterQueue", name="cq"), s=800.0))
    assert made.sample(1000.0) == set()


def sweep(*, owner: str, reclaimable: bool = True) -> tuple[StatusBook, set[ObjectRef]]:
    """Team a's workload ml/sweep of three 1-cpu pods (owned by a `owner`, "" for a bare
    Workload) reserved at 100 s; two of its pods finished for good at 400 s: the book, and
    what that told it to write."""
    made = StatusBook(kueue_version="v1beta2", fair=FAIR, reclaimable_pods=reclaimable)
    submitted = pb.WorkloadSubmitted(
        queue_name="a",
        pod_sets=[pb.PodSetSummary(name="main", count=3)],
        owner=pb.OwnerRef(kind=owner, name="sweep") if owner else None,
    )
    gone = pb.WorkloadReclaimablePods(pods=[pb.ReclaimablePodCount(pod_set="main", count=2)])
    for env in (
        applied("ClusterQueue", "cq", {}),
        applied("LocalQueue", "ml/a", {"clusterQueue": "cq"}),
        at("submitted", submitted, s=90.0, workload="ml/sweep"),
        at("quota_reserved", reserved("3", count=3), s=100.0, workload="ml/sweep"),
    ):
        made.apply(env)
    return made, made.apply(at("reclaimable_pods", gone, s=400.0, workload="ml/sweep"))


@pytest.mark.parametrize("owner", ["Job", ""])
def test_reclaimed_pods_leave_the_local_queues_usage_from_the_events_time(owner: str) -> None:
    made, refs = sweep(owner=owner)
    assert ObjectRef(kind="LocalQueue", namespace="ml", name="a") in refs
    # 300 s of 3 cpu (1 - 0.5 ** 0.5 of them) plus the entry penalty that much faded: 1.5 cores.
    assert fair_sharing(made, "a") == {
        "admissionFairSharingStatus": {
            "consumedResources": {"cpu": "1500m"},
            "lastUpdate": "1970-01-01T00:06:40Z",
        }
    }
    # From 400 s one pod runs: at the 900 s tick 1.5 x 0.5 ** (5 / 6) + 1 x (1 - 0.5 ** (5 / 6)),
    # where the three pods would have reached 2.158 cores.
    made.sample(1000.0)
    assert fair_sharing(made, "a")["admissionFairSharingStatus"]["consumedResources"] == {
        "cpu": "1281m"
    }


def test_with_kueues_reclaimable_pods_gate_off_the_usage_stays_as_admitted() -> None:
    made, _ = sweep(owner="Job", reclaimable=False)
    made.sample(1000.0)
    assert fair_sharing(made, "a")["admissionFairSharingStatus"]["consumedResources"] == {
        "cpu": "2158m"
    }


class Sink:
    def __init__(self) -> None:
        self.desired: list[tuple[ObjectRef, Mapping[str, Any]]] = []
        self.enough = asyncio.Event()

    def desire(self, ref: ObjectRef, status: Mapping[str, Any], **_: Any) -> None:
        self.desired.append((ref, status))
        if len(self.desired) == 2:
            self.enough.set()


@pytest.mark.timeout(10)
async def test_the_status_task_desires_a_local_queues_status_at_each_tick() -> None:
    made, sink = book(FAIR), Sink()
    # Each look at the clock is a hundredth of a second before a tick: the task waits just
    # past it, then samples the next interval.
    times: Iterator[float] = iter(1199.99 + 300.0 * n for n in range(100))
    task = asyncio.create_task(
        sample_fair_sharing(made, sink, interval_s=300.0, clock=lambda: next(times))
    )
    try:
        await asyncio.wait_for(sink.enough.wait(), timeout=5)
    finally:
        task.cancel()
    updates = [status["fairSharing"]["admissionFairSharingStatus"] for _, status in sink.desired]
    assert [u["lastUpdate"] for u in updates] == ["1970-01-01T00:15:00Z", "1970-01-01T00:20:00Z"]
    assert {ref.name for ref, _ in sink.desired} == {"a"}
