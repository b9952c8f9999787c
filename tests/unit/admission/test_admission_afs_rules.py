"""Admission fair sharing's rules in the admission service (the engine's, as `muster simulate`
decides them; the scenarios are tests/scenarios/afs/).

The entry penalty, as Kueue's scheduler prices it (pkg/scheduler/scheduler.go,
shouldApplyEntryPenalty): only for a workload admitted in a ClusterQueue whose admissionScope
orders by usage. A LocalQueue whose ClusterQueue starts to order by usage later carries what
its workloads ran, without penalties for their starts. Team b's b1 (1 cpu) runs from 0 s, team
a's a1 (2 cpu) from 290 s to 300 s. At 300 s, with a penalty for each start, team a's usage
(about 0.60) is above team b's (about 0.50); without, it is below (about 0.02 against 0.29).
a2 and b2 (2 cpu each) wait for the 2 cpu a1 frees.

A StrictFIFO ClusterQueue orders by usage too (Kueue's StrictFIFO heap, queueOrderingFunc).
"""

from __future__ import annotations

from typing import Any

import admission_stream as kit

from muster.admission.state import AdmissionState
from muster.api.model import AdmissionFairSharingConfig, KueueConfig
from muster.contracts.v1 import events_pb2 as pb

FAIR = KueueConfig(admission_fair_sharing=AdmissionFairSharingConfig(usage_half_life_s=600.0))


def shared_queue(*, usage_based: bool) -> dict[str, Any]:
    cq = kit.cluster_queue(cpu="3")
    if usage_based:
        cq["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    return cq


def admitted(envs: list[pb.Envelope]) -> list[str]:
    return [e.workload for e in envs if e.WhichOneof("payload") == "admitted"]


def second_in_line(*, usage_based_from_start: bool) -> list[str]:
    """Who of a2 and b2 gets what a1 frees at 300 s, the ClusterQueue ordering by usage from
    then on (and before, when `usage_based_from_start`)."""
    stream = kit.Stream()
    live = AdmissionState(kueue=FAIR)
    live.take_ownership(now_s=0.0)
    cq = shared_queue(usage_based=usage_based_from_start)
    for manifest in (kit.flavor(), cq, kit.local_queue("a"), kit.local_queue("b")):
        stream.run(live, kit.applied(manifest), now_s=0.0)
    b1 = kit.submitted(kit.workload("b1", queue="b"), at_s=0.0)
    assert admitted(stream.run(live, b1, now_s=0.0)) == ["ns/b1"]
    a1 = kit.submitted(kit.workload("a1", cpu="2", queue="a"), at_s=290.0)
    assert admitted(stream.run(live, a1, now_s=290.0)) == ["ns/a1"]
    for name, queue in (("a2", "a"), ("b2", "b")):
        waiting = kit.submitted(kit.workload(name, cpu="2", queue=queue), at_s=295.0)
        assert admitted(stream.run(live, waiting, now_s=295.0)) == []
    scoped = kit.applied(shared_queue(usage_based=True), at_ns=299 * 10**9)
    assert admitted(stream.run(live, scoped, now_s=299.0)) == []
    done = kit.reported("finished", "ns/a1", at_s=300.0)
    return admitted(stream.run(live, done, now_s=300.0))


def test_no_entry_penalty_outside_a_usage_based_cluster_queue() -> None:
    # a1's start was not priced: team a has used less than team b, a2 goes first
    assert second_in_line(usage_based_from_start=False) == ["ns/a2"]


def test_entry_penalties_in_a_usage_based_cluster_queue() -> None:
    # both starts were priced: a1's penalty (2 cpu) puts team a above team b, b2 goes first
    assert second_in_line(usage_based_from_start=True) == ["ns/b2"]


def test_a_strict_fifo_cluster_queue_orders_by_usage_in_the_service() -> None:
    # As in tests/scenarios/afs/strict-fifo-flood-yields.yaml: team a floods a 3-cpu StrictFIFO
    # ClusterQueue with admissionScope; when a1 ends, team b's later b1 heads the queue.
    stream = kit.Stream()
    live = AdmissionState(kueue=FAIR)
    live.take_ownership(now_s=0.0)
    cq = shared_queue(usage_based=True)
    cq["spec"]["queueingStrategy"] = "StrictFIFO"
    for manifest in (kit.flavor(), cq, kit.local_queue("a"), kit.local_queue("b")):
        stream.run(live, kit.applied(manifest), now_s=0.0)
    for name in ("a1", "a2", "a3", "a4"):
        stream.run(live, kit.submitted(kit.workload(name, queue="a"), at_s=1.0), now_s=1.0)
    stream.run(live, kit.submitted(kit.workload("b1", queue="b"), at_s=2.0), now_s=2.0)
    finished = kit.reported("finished", "ns/a1", at_s=100.0)
    assert admitted(stream.run(live, finished, now_s=100.0)) == ["ns/b1"]
