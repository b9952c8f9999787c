"""reclaimable_pods through admission: quota given back live, and the same after a rebuild."""

from __future__ import annotations

import pytest
from admission_stream import Stream, applied, cluster_queue, flavor, local_queue, reported
from admission_stream import submitted as submitted_event
from admission_stream import workload as workload_manifest
from test_admission_dispatch import world

from muster.admission.fact_reader import fact_of
from muster.admission.facts import FactError
from muster.admission.state import AdmissionState
from muster.api.model import WorkloadKey
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import EventType

A = WorkloadKey("ns/a")


def _reclaimable(count: int, pod_set: str = "main") -> pb.WorkloadReclaimablePods:
    return pb.WorkloadReclaimablePods(pods=[pb.ReclaimablePodCount(pod_set=pod_set, count=count)])


def _workload(name: str, pods: int) -> pb.Envelope:
    manifest = workload_manifest(name, cpu="1")
    manifest["spec"]["podSets"][0]["count"] = pods
    return submitted_event(manifest)


def _running_with_one_waiting() -> tuple[Stream, AdmissionState]:
    stream, live = Stream(), AdmissionState()
    live.take_ownership(now_s=0.0)
    for manifest in (flavor(), cluster_queue(cpu="4"), local_queue()):
        stream.run(live, applied(manifest))
    assert [e.workload for e in stream.run(live, _workload("a", 4)) if e.HasField("admitted")]
    assert not [e for e in stream.run(live, _workload("b", 2)) if e.HasField("admitted")]
    return stream, live


def test_pods_given_back_admit_what_waits_and_a_rebuild_holds_the_same() -> None:
    stream, live = _running_with_one_waiting()
    out = stream.run(live, reported("reclaimable_pods", "ns/a", _reclaimable(2)))
    assert [e.workload for e in out if e.HasField("admitted")] == ["ns/b"]

    rebuilt = stream.rebuild()
    assert rebuilt.take_ownership(now_s=20.0) == []  # nothing decided again
    assert rebuilt.engine.cluster_queue_status("cq") == live.engine.cluster_queue_status("cq")
    (reserved,) = rebuilt.engine.cluster_queue_status("cq").flavors_reservation
    assert [r.total for r in reserved.resources] == [4000]  # a's 2 cpu and b's 2

    # Taken back after the rebuild: a holds its 4 again (over quota, as Kueue counts it).
    stream.run(rebuilt, reported("reclaimable_pods", "ns/a", pb.WorkloadReclaimablePods()))
    (reserved,) = rebuilt.engine.cluster_queue_status("cq").flavors_reservation
    assert [r.total for r in reserved.resources] == [6000]


def test_a_rebuild_before_the_waiting_one_was_decided_admits_it_once() -> None:
    stream, _ = _running_with_one_waiting()
    stream.append(reported("reclaimable_pods", "ns/a", _reclaimable(2)))  # live died first
    rebuilt = stream.rebuild()
    out = rebuilt.take_ownership(now_s=20.0)
    assert [e.object for e in out if e.type is EventType.ADMITTED] == ["ns/b"]


@pytest.mark.parametrize(("pod_set", "count"), [("", 1), ("main", -1)])
def test_an_unreadable_reclaimable_pods_event_is_refused_with_its_reason(
    pod_set: str, count: int
) -> None:
    env = reported("reclaimable_pods", "ns/a", _reclaimable(count, pod_set))
    with pytest.raises(FactError, match=r"reclaimable_pods ns/a: pods\[0\] needs a pod_set"):
        fact_of(env)


def test_finished_pods_count_from_the_cluster_of_the_workloads_object_not_its_workers() -> None:
    # Under MultiKueue, as Kueue's job reconciler on the manager: the manager's Job shows its
    # copy's status from where it runs, and its Workload's reclaimablePods is the one counted.
    stream, state = world()
    stream.run(state, submitted_event(workload_manifest("a", cpu="2")))  # dispatched to east
    told = _reclaimable(1)
    for cluster, holds in (("west", {"cpu": 2000}), ("east", {"cpu": 2000}), ("local", {})):
        env = reported("reclaimable_pods", "ns/a", told)
        env.cluster = cluster
        stream.run(state, env)
        held = {r: n for (_, r), n in state.engine.records[A].usage.items() if n}
        assert held == holds, cluster
