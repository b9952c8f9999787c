"""LocalQueue `status.fairSharing.admissionFairSharingStatus` as the watcher writes it when
Kueue's Configuration has `admissionFairSharing`: the usage admission orders by, sampled as
Kueue's LocalQueue controller samples it (pkg/controller/core/localqueue_controller.go): every
`usageSamplingInterval` from its last sample or the last settled entry penalty, and at every
event while an entry penalty waits for admission checks; never at an admission or a finish
alone."""

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
USAGE_BASED = {"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}
A = ObjectRef(kind="LocalQueue", namespace="ml", name="a")


def at(field: str, payload: Any, *, s: float, workload: str = "") -> pb.Envelope:
    return new_event(
        field, payload, cluster="local", workload=workload, source="test", now_ns=int(s * 1e9)
    )


def applied(kind: str, name: str, spec: dict[str, Any], *, s: float = 1.0) -> pb.Envelope:
    namespace, _, short = name.rpartition("/")
    manifest = json.dumps(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": kind,
            "metadata": {"name": short} | ({"namespace": namespace} if namespace else {}),
            "spec": spec,
        }
    )
    return at("config_applied", pb.ConfigApplied(kind=kind, name=name, manifest_json=manifest), s=s)


def assignment(cpu: str, count: int) -> pb.Admission:
    podset = pb.PodSetAssignment(
        name="main", flavors={"cpu": "default"}, count=count, resource_usage={"cpu": cpu}
    )
    return pb.Admission(cluster_queue="cq", pod_set_assignments=[podset])


def admitted(cpu: str, *, count: int = 1) -> pb.WorkloadAdmitted:
    """Admitted with its reservation: no admission check to wait for."""
    return pb.WorkloadAdmitted(admission=assignment(cpu, count), with_reservation=True)


def reserved(cpu: str, *, checks: tuple[str, ...]) -> pb.QuotaReserved:
    return pb.QuotaReserved(admission=assignment(cpu, 1), admission_checks=checks)


def submitted(name: str, *, s: float) -> pb.Envelope:
    return at("submitted", pb.WorkloadSubmitted(queue_name="a"), s=s, workload=name)


def book(fair: AdmissionFairSharingConfig | None, cq: dict[str, Any] = USAGE_BASED) -> StatusBook:
    """Team a ran 2 cpu from 100 s to 650 s; team b's LocalQueue (applied at 50 s) ran nothing."""
    made = StatusBook(kueue_version="v1beta2", fair=fair)
    for env in (
        applied("ClusterQueue", "cq", cq),
        applied("LocalQueue", "ml/a", {"clusterQueue": "cq"}),
        applied("LocalQueue", "ml/b", {"clusterQueue": "cq"}, s=50.0),
        submitted("ml/a1", s=90.0),
        at("admitted", admitted("2"), s=100.0, workload="ml/a1"),
        at("finished", pb.WorkloadFinished(), s=650.0, workload="ml/a1"),
    ):
        made.apply(env)
    return made


def fair_sharing(made: StatusBook, name: str) -> Any:
    status = made.status_of(ObjectRef(kind="LocalQueue", namespace="ml", name=name)) or {}
    return status.get("fairSharing")


def status(made: StatusBook, name: str) -> tuple[str, dict[str, str]]:
    fair = fair_sharing(made, name)["admissionFairSharingStatus"]
    return fair["lastUpdate"], fair["consumedResources"]


def test_a_local_queue_shows_its_usage_as_of_its_last_sample() -> None:
    made = book(FAIR)
    # Admitted at 100 s: its entry penalty settled, the next sample due at 400 s, taken as the
    # finish at 650 s came after it: 300 s of 2 cpu, 2 x (1 - 0.5 ** 0.5) = 0.586 reached, plus
    # the entry penalty (as much) faded by 0.5 ** 0.5: one core.
    assert fair_sharing(made, "a") == {
        "admissionFairSharingStatus": {
            "consumedResources": {"cpu": "1"},
            "lastUpdate": "1970-01-01T00:06:40Z",
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


def test_an_admission_writes_no_sample_and_the_next_comes_an_interval_after_it() -> None:
    made = StatusBook(kueue_version="v1beta2", fair=FAIR)
    for env in (
        applied("ClusterQueue", "cq", USAGE_BASED),
        applied("LocalQueue", "ml/a", {"clusterQueue": "cq"}),
        submitted("ml/a1", s=290.0),
    ):
        made.apply(env)
    made.apply(at("admitted", admitted("2"), s=299.0, workload="ml/a1"))
    assert status(made, "a") == ("1970-01-01T00:00:01Z", {})  # Kueue: settled, not written
    # Its sample was due at 301 s, a second after the admission: the settlement moved it on.
    assert made.sample(301.0) == set()
    assert made.next_sample_s() == 599.0
    assert made.sample(598.0) == set()
    assert made.sample(599.0) == {A}
    assert status(made, "a") == ("1970-01-01T00:09:59Z", {"cpu": "1"})


def test_a_sample_writes_the_usage_decayed_to_the_tick_once_per_interval() -> None:
    made = book(FAIR)
    # Due at 700 s, then 1000 s: at 1000 s the usage left at 650 s has faded 350 s.
    assert made.sample(1000.0) == {A}  # team b consumed nothing and showed nothing: no write
    assert status(made, "a") == ("1970-01-01T00:16:40Z", {"cpu": "835m"})
    assert made.sample(1299.0) == set()  # the same interval: sampled already
    assert made.sample(1300.0) == {A}
    assert status(made, "a") == ("1970-01-01T00:21:40Z", {"cpu": "590m"})


def test_a_late_look_samples_at_the_last_due_tick_not_at_the_look() -> None:
    made = book(FAIR)
    assert made.sample(1250.0) == {A}  # due at 700 s, 1000 s: the later one
    assert status(made, "a") == ("1970-01-01T00:16:40Z", {"cpu": "835m"})
    assert made.next_sample_s() == 1300.0


def test_an_entry_penalty_waiting_for_checks_samples_at_every_event_of_its_queue() -> None:
    made = book(FAIR)
    made.apply(submitted("ml/a2", s=790.0))
    made.apply(submitted("ml/a3", s=795.0))
    made.apply(at("quota_reserved", reserved("1", checks=("prov",)), s=800.0, workload="ml/a2"))
    # Kueue samples as the penalty is pushed, leaving it out (as the run it starts).
    assert status(made, "a")[0] == "1970-01-01T00:13:20Z"
    made.apply(at("admitted", admitted("1"), s=850.0, workload="ml/a3"))
    assert status(made, "a")[0] == "1970-01-01T00:14:10Z"  # a2's penalty still unsettled
    admitted_a2 = pb.WorkloadAdmitted(admission=assignment("1", 1))
    made.apply(at("admitted", admitted_a2, s=900.0, workload="ml/a2"))
    assert status(made, "a")[0] == "1970-01-01T00:14:10Z"  # settled: no sample
    assert made.sample(1199.0) == set()  # due an interval after the settlement
    assert made.sample(1200.0) == {A}


def test_a_queue_that_does_not_order_by_usage_shows_usage_without_entry_penalty() -> None:
    made = StatusBook(kueue_version="v1beta2", fair=FAIR)
    for env in (
        applied("ClusterQueue", "cq", {}),
        applied("LocalQueue", "ml/a", {"clusterQueue": "cq"}),
        submitted("ml/a1", s=90.0),
        at("admitted", admitted("2"), s=100.0, workload="ml/a1"),
    ):
        made.apply(env)
    # Kueue prices and settles penalties only where the ClusterQueue orders by usage; its
    # LocalQueue controller samples every LocalQueue. 201 s of 2 cpu: 2 x (1 - 0.5 ** 0.335).
    assert made.sample(301.0) == {A}
    assert status(made, "a") == ("1970-01-01T00:05:01Z", {"cpu": "414m"})


@pytest.mark.parametrize(
    ("cq", "sampled"),
    [
        # Admitted at 100 s, sampled at 400 s: 300 s of 2 cpu reach 2 x (1 - 0.5 ** 0.5); the
        # penalty, on all 4 cpu, twice that faded by 0.5 ** 0.5: sqrt(2) cores (priced on the
        # 2 admitted cpu: one core).
        (USAGE_BASED, ("1970-01-01T00:06:40Z", {"cpu": "1414m"})),
        # No entry penalty where the ClusterQueue does not order by usage, and no settlement
        # to move the grid: 201 s of 2 cpu at the 301 s tick, 2 x (1 - 0.5 ** 0.335).
        ({}, ("1970-01-01T00:05:01Z", {"cpu": "414m"})),
    ],
)
def test_a_partial_admission_pays_its_entry_penalty_on_every_pod_it_asked_for(
    cq: dict[str, Any], sampled: tuple[str, dict[str, str]]
) -> None:
    made = StatusBook(kueue_version="v1beta2", fair=FAIR)
    job = pb.WorkloadSubmitted(
        queue_name="a", pod_sets=[pb.PodSetSummary(name="main", count=4, min_count=2)]
    )
    for env in (
        applied("ClusterQueue", "cq", cq),
        applied("LocalQueue", "ml/a", {"clusterQueue": "cq"}),
        at("submitted", job, s=90.0, workload="ml/partial"),
        at("admitted", admitted("2", count=2), s=100.0, workload="ml/partial"),  # 2 of 4 pods
    ):
        made.apply(env)
    assert made.sample(400.0) == {A}
    assert status(made, "a") == sampled


@pytest.mark.parametrize(("gate", "consumed"), [(True, "1207m"), (False, "1414m")])
def test_a_partial_admissions_entry_penalty_leaves_out_pods_finished_before_it(
    gate: bool, consumed: str
) -> None:
    made = StatusBook(kueue_version="v1beta2", fair=FAIR, reclaimable_pods=gate)
    finished = {"status": {"reclaimablePods": [{"name": "main", "count": 1}]}}
    job = pb.WorkloadSubmitted(
        queue_name="a",
        pod_sets=[pb.PodSetSummary(name="main", count=4, min_count=2)],
        owner=pb.OwnerRef(kind="Job", name="partial"),
        manifest_json=json.dumps(finished),
    )
    for env in (
        applied("ClusterQueue", "cq", USAGE_BASED),
        applied("LocalQueue", "ml/a", {"clusterQueue": "cq"}),
        at("submitted", job, s=90.0, workload="ml/partial"),
        at("admitted", admitted("2", count=2), s=100.0, workload="ml/partial"),
    ):
        made.apply(env)
    made.sample(400.0)
    # With Kueue's ReclaimablePods gate the penalty is on the 3 pods still needed: 2 cpu
    # reached 2 x (1 - 0.5 ** 0.5), plus 3 x that faded by 0.5 ** 0.5; without it, on all 4.
    assert status(made, "a") == ("1970-01-01T00:06:40Z", {"cpu": consumed})


def test_a_local_queue_without_its_cluster_queue_is_not_sampled() -> None:
    made = book(FAIR)
    made.apply(at("config_deleted", pb.ConfigDeleted(kind="ClusterQueue", name="cq"), s=800.0))
    assert made.sample(1000.0) == set()
    assert made.next_sample_s() is None


def sweep(*, owner: str, reclaimable: bool = True) -> tuple[StatusBook, set[ObjectRef]]:
    """Team a's workload ml/sweep of three 1-cpu pods (owned by a `owner`, "" for a bare
    Workload) admitted at 100 s; two of its pods finished for good at 450 s: the book, and
    what that told it to write."""
    made = StatusBook(kueue_version="v1beta2", fair=FAIR, reclaimable_pods=reclaimable)
    summary = pb.WorkloadSubmitted(
        queue_name="a",
        pod_sets=[pb.PodSetSummary(name="main", count=3)],
        owner=pb.OwnerRef(kind=owner, name="sweep") if owner else None,
    )
    gone = pb.WorkloadReclaimablePods(pods=[pb.ReclaimablePodCount(pod_set="main", count=2)])
    for env in (
        applied("ClusterQueue", "cq", USAGE_BASED),
        applied("LocalQueue", "ml/a", {"clusterQueue": "cq"}),
        at("submitted", summary, s=90.0, workload="ml/sweep"),
        at("admitted", admitted("3", count=3), s=100.0, workload="ml/sweep"),
    ):
        made.apply(env)
    return made, made.apply(at("reclaimable_pods", gone, s=450.0, workload="ml/sweep"))


@pytest.mark.parametrize("owner", ["Job", ""])
def test_reclaimed_pods_leave_the_local_queues_usage_from_the_events_time(owner: str) -> None:
    made, refs = sweep(owner=owner)
    # The sample due at 400 s comes first, of three pods: 300 s of 3 cpu (1 - 0.5 ** 0.5 of
    # them) plus the entry penalty that much faded: 1.5 cores.
    assert A in refs
    assert status(made, "a") == ("1970-01-01T00:06:40Z", {"cpu": "1500m"})
    # From 450 s one pod runs: at the 1000 s tick what three pods reached by 450 s, faded 550 s,
    # plus 1 x (1 - 0.5 ** (550 / 600)), where the three pods would have reached 2.25 cores.
    assert made.sample(1000.0) == {A}
    assert status(made, "a") == ("1970-01-01T00:16:40Z", {"cpu": "1309m"})


def test_with_kueues_reclaimable_pods_gate_off_the_usage_stays_as_admitted() -> None:
    made, _ = sweep(owner="Job", reclaimable=False)
    made.sample(1000.0)
    assert status(made, "a") == ("1970-01-01T00:16:40Z", {"cpu": "2250m"})


class Sink:
    def __init__(self) -> None:
        self.desired: list[tuple[ObjectRef, Mapping[str, Any]]] = []
        self.enough = asyncio.Event()

    def desire(self, ref: ObjectRef, status: Mapping[str, Any], **_: Any) -> None:
        self.desired.append((ref, status))
        if len(self.desired) == 2:
            self.enough.set()


@pytest.mark.timeout(10)
async def test_the_status_task_desires_a_local_queues_status_as_each_sample_falls_due() -> None:
    made, sink = book(FAIR), Sink()
    waits: list[float] = []
    # The task looks at the clock at 1000 s, then where its waits would take it.
    times: Iterator[float] = iter([1000.0, 1250.01, *(1300.01 + 300.0 * n for n in range(100))])

    async def sleep(wait_s: float) -> None:
        waits.append(round(wait_s, 2))
        await asyncio.sleep(0)

    task = asyncio.create_task(
        sample_fair_sharing(made, sink, interval_s=300.0, clock=lambda: next(times), sleep=sleep)
    )
    try:
        await asyncio.wait_for(sink.enough.wait(), timeout=5)
    finally:
        task.cancel()
    firsts = sink.desired[:2]
    updates = [status["fairSharing"]["admissionFairSharingStatus"] for _, status in firsts]
    assert [u["lastUpdate"] for u in updates] == ["1970-01-01T00:16:40Z", "1970-01-01T00:21:40Z"]
    assert {ref.name for ref, _ in firsts} == {"a"}
    # Team b's (idle) sample is due at 1250 s, team a's at 1300 s: it wakes just past each.
    assert waits[:2] == [250.01, 50.0]


def queue_status(*, active: bool, s: float) -> pb.Envelope:
    status = pb.ClusterQueueStatus(
        name="cq", active=active, inactive_reason="" if active else "Stopped"
    )
    return at("queue_status", pb.QueueStatusChanged(cluster_queue=status), s=s)


def test_an_inactive_cluster_queues_local_queues_are_sampled_once_it_is_active_again() -> None:
    made = book(FAIR)
    made.apply(queue_status(active=False, s=660.0))
    assert made.sample(1000.0) == set()
    assert made.next_sample_s() is None
    made.apply(queue_status(active=True, s=1100.0))
    assert made.sample(1100.0) == {A}  # at the tick its grid reached meanwhile
    assert status(made, "a") == ("1970-01-01T00:16:40Z", {"cpu": "835m"})


def test_a_stopped_local_queue_is_not_sampled() -> None:
    made = book(FAIR)
    made.apply(applied("LocalQueue", "ml/a", {"clusterQueue": "cq", "stopPolicy": "Hold"}, s=660.0))
    assert made.sample(1000.0) == set()
    made.apply(applied("LocalQueue", "ml/a", {"clusterQueue": "cq"}, s=1100.0))
    assert made.sample(1100.0) == {A}


def test_an_event_told_after_a_later_sample_moves_no_last_update_back() -> None:
    made = book(FAIR)
    made.apply(submitted("ml/a2", s=790.0))
    assert made.sample(1000.0) == {A}
    # Stamped before the sample by its producer's clock, told after it: samples (a penalty
    # waits for checks) as of the sample, not before it.
    made.apply(at("quota_reserved", reserved("1", checks=("prov",)), s=999.0, workload="ml/a2"))
    assert status(made, "a") == ("1970-01-01T00:16:40Z", {"cpu": "835m"})
