"""Admission fair sharing in the admission service: a replica rebuilt from the stream has the
live one's LocalQueue usage (runs from each recorded QuotaReserved to the event that released
it, at those events' times), so it decides the same fair order.

A snapshot carries what finished workloads left in each LocalQueue's usage (their stories are
not in it); live workloads' runs come back as their stories are replayed.
"""

from __future__ import annotations

import math
from typing import Any

import admission_stream as kit
import msgspec
import pytest

from muster.admission.rebuild import restore
from muster.admission.snapshot import (
    CompactLog,
    EndedUsage,
    Snapshot,
    decode_snapshot,
    encode_snapshot,
)
from muster.admission.state import AdmissionState
from muster.api.model import AdmissionFairSharingConfig, KueueConfig
from muster.bus import decode
from muster.contracts.v1 import events_pb2 as pb

SETTINGS = AdmissionFairSharingConfig(usage_half_life_s=600.0)
FAIR = KueueConfig(admission_fair_sharing=SETTINGS)


def shared_queue() -> dict[str, Any]:
    cq = kit.cluster_queue(cpu="2")
    cq["spec"]["admissionScope"] = {"admissionMode": "UsageBasedAdmissionFairSharing"}
    return cq


def admitted(envs: list[pb.Envelope]) -> list[str]:
    return [e.workload for e in envs if e.WhichOneof("payload") == "admitted"]


def usages(state: AdmissionState, *, now_s: float) -> dict[str, float]:
    book = state.engine.state.admission_usage
    assert book is not None
    return {
        q: book.usage(q, now_s=now_s, config=SETTINGS, queue_weight=1.0) for q in ("ns/a", "ns/b")
    }


def flooded(stream: kit.Stream) -> AdmissionState:
    """Team a floods a 2-cpu ClusterQueue (a1, a2 run); b1 comes later; a1 finishes."""
    live = AdmissionState(kueue=FAIR)
    live.take_ownership(now_s=0.0)
    for manifest in (kit.flavor(), shared_queue(), kit.local_queue("a"), kit.local_queue("b")):
        stream.run(live, kit.applied(manifest))
    for name in ("a1", "a2", "a3"):
        stream.run(live, kit.submitted(kit.workload(name, queue="a"), at_s=1.0), now_s=1.0)
    stream.run(live, kit.submitted(kit.workload("b1", queue="b"), at_s=2.0), now_s=2.0)
    # The other team's later workload first: team a has used the queue since 1 s.
    finished = kit.reported("finished", "ns/a1", at_s=100.0)
    assert admitted(stream.run(live, finished, now_s=100.0)) == ["ns/b1"]
    return live


def test_a_flood_yields_to_the_other_team_in_the_service() -> None:
    stream = kit.Stream()
    live = flooded(stream)
    # a2 ends; a3 is the only one waiting: it goes, team a's usage or not
    done = kit.reported("finished", "ns/a2", at_s=130.0)
    assert admitted(stream.run(live, done, now_s=130.0)) == ["ns/a3"]


def stored(
    stream: kit.Stream, live: AdmissionState, *, usage: tuple[EndedUsage, ...] = ()
) -> Snapshot:
    """The snapshot `live` would write now (with `usage`), stored and read back."""
    history = CompactLog(live.ledger)
    for env in stream.log:
        history.add(env)
    taken = msgspec.structs.replace(history.snapshot(sequence=len(stream.log)), usage=usage)
    return decode_snapshot(encode_snapshot(taken))


def rebuilt_from(source: str, stream: kit.Stream, live: AdmissionState) -> AdmissionState:
    """A new replica rebuilt from the whole `stream`, or from the snapshot `live` would write
    now (stored and read back): the finished workloads' stories are not in it."""
    if source == "stream":
        return stream.rebuild(kueue=FAIR)
    snapshot = stored(stream, live, usage=live.ended_usage())
    assert {u.local_queue for u in snapshot.usage} == {"ns/a", "ns/b"}
    assert "ns/a1" not in {e.workload for e in map(decode, snapshot.events)}  # finished
    state = AdmissionState(kueue=FAIR)
    restore(state, snapshot, history=CompactLog(state.ledger), max_event_bytes=1 << 20)
    return state


@pytest.mark.parametrize("source", ["stream", "snapshot"])
def test_a_rebuilt_replica_has_the_live_usage_and_order(source: str) -> None:
    stream = kit.Stream()
    live = flooded(stream)
    # A finish consumed late (at 180 s) counts from its event's time (120 s), live or rebuilt.
    late = kit.reported("finished", "ns/b1", at_s=120.0)
    stream.run(live, late, now_s=180.0)
    stream.run(live, kit.submitted(kit.workload("b2", queue="b"), at_s=190.0), now_s=190.0)

    rebuilt = rebuilt_from(source, stream, live)
    assert rebuilt.take_ownership(now_s=195.0) == []  # everything was decided already
    assert usages(rebuilt, now_s=200.0) == usages(live, now_s=200.0)
    assert usages(live, now_s=200.0)["ns/b"] > 0.0  # b1's run counts, though it finished

    done = kit.reported("finished", "ns/a2", at_s=200.0)
    told = admitted(stream.run(live, done, now_s=200.0, publish=False))
    assert told == admitted(kit.Stream().run(rebuilt, done, now_s=200.0, publish=False))
    assert told == ["ns/b2"]  # team a ran 1 s..200 s, team b only 100 s..120 s


def test_a_snapshot_without_usage_starts_from_the_live_workloads() -> None:
    # A snapshot written before it carried usage (or by a replica with fair sharing off):
    # read as before, each LocalQueue holding only what its live workloads' stories hold.
    stream = kit.Stream()
    live = flooded(stream)
    old = stored(stream, live)
    assert old.usage == ()
    state = AdmissionState(kueue=FAIR)
    restore(state, old, history=CompactLog(state.ledger), max_event_bytes=1 << 20)
    assert state.take_ownership(now_s=150.0) == []
    assert 0.0 < usages(state, now_s=150.0)["ns/a"] < usages(live, now_s=150.0)["ns/a"]


def test_a_snapshot_usage_record_that_is_not_finite_is_skipped_not_the_snapshot() -> None:
    state = AdmissionState(kueue=FAIR)
    bad = (
        EndedUsage(local_queue="ns/a", partition=0, at_s=math.nan, consumed={"cpu": 1.0}),
        EndedUsage(local_queue="ns/b", partition=0, at_s=1.0, consumed={"cpu": -math.inf}),
        EndedUsage(local_queue="ns/c", partition=0, at_s=1.0, consumed={"cpu": 2.0}),
    )
    state.restore_usage(bad, range(64))
    book = state.engine.state.admission_usage
    assert book is not None
    assert sorted(book.queues) == ["ns/c"]


def reclaimed(
    *, told_at_s: float | None, consumed_at_s: float = 80.0
) -> tuple[kit.Stream, AdmissionState]:
    """Team a's `big` (4 pods of 1 cpu) runs from 1 s; 3 of its pods finish for good at
    `told_at_s` (the watcher's reclaimable_pods, consumed at `consumed_at_s`; None: never)."""
    stream = kit.Stream()
    live = AdmissionState(kueue=FAIR)
    live.take_ownership(now_s=0.0)
    cq = shared_queue()
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "4"
    for manifest in (kit.flavor(), cq, kit.local_queue("a"), kit.local_queue("b")):
        stream.run(live, kit.applied(manifest))
    big = kit.workload("big", queue="a")
    big["spec"]["podSets"][0]["count"] = 4
    assert admitted(stream.run(live, kit.submitted(big, at_s=1.0), now_s=1.0)) == ["ns/big"]
    if told_at_s is not None:
        pods = pb.WorkloadReclaimablePods(pods=[pb.ReclaimablePodCount(pod_set="main", count=3)])
        told = kit.reported("reclaimable_pods", "ns/big", pods, at_s=told_at_s)
        stream.run(live, told, now_s=consumed_at_s)
    return stream, live


@pytest.mark.parametrize("source", ["stream", "snapshot"])
def test_reclaimed_pods_leave_the_usage_from_their_event_live_and_rebuilt(source: str) -> None:
    # Kueue's LocalQueue usage counts a podset's pods less its reclaimable ones: from 50 s
    # team a runs 1 cpu, not 4, whenever a replica consumed the news.
    stream, live = reclaimed(told_at_s=50.0)
    whole = usages(reclaimed(told_at_s=None)[1], now_s=300.0)["ns/a"]
    assert 0.0 < usages(live, now_s=300.0)["ns/a"] < whole - 0.5
    on_time = reclaimed(told_at_s=50.0, consumed_at_s=50.0)[1]
    assert usages(on_time, now_s=300.0) == usages(live, now_s=300.0)
    if source == "stream":
        rebuilt = stream.rebuild(kueue=FAIR)
    else:
        rebuilt = AdmissionState(kueue=FAIR)
        snapshot = stored(stream, live, usage=live.ended_usage())
        restore(rebuilt, snapshot, history=CompactLog(rebuilt.ledger), max_event_bytes=1 << 20)
    assert rebuilt.take_ownership(now_s=90.0) == []
    assert usages(rebuilt, now_s=300.0) == usages(live, now_s=300.0)
