"""Admission fair sharing in the admission service: a replica rebuilt from the stream has the
live one's LocalQueue usage (runs from each recorded QuotaReserved to the event that released
it, at those events' times), so it decides the same fair order.

Snapshots do not carry the usage finished workloads left yet, so the service keeps fair sharing
off by default (`AdmissionState(admission_fair_sharing=...)`; docs/kueue-compatibility.md).
"""

from __future__ import annotations

from typing import Any

import admission_stream as kit

from muster.admission.state import AdmissionState
from muster.api.model import AdmissionFairSharingConfig, KueueConfig
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
    live = AdmissionState(kueue=FAIR, admission_fair_sharing=True)
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


def test_a_replica_rebuilt_from_the_stream_has_the_live_usage_and_order() -> None:
    stream = kit.Stream()
    live = flooded(stream)
    # The finished one is told late (consumed at 180 s, released at 100 s... its event's time).
    late = kit.reported("finished", "ns/b1", at_s=120.0)
    stream.run(live, late, now_s=180.0)
    stream.run(live, kit.submitted(kit.workload("b2", queue="b"), at_s=190.0), now_s=190.0)

    rebuilt = stream.rebuild(kueue=FAIR, admission_fair_sharing=True)
    assert rebuilt.take_ownership(now_s=195.0) == []  # everything was decided already
    assert usages(rebuilt, now_s=200.0) == usages(live, now_s=200.0)
    assert usages(live, now_s=200.0)["ns/b"] > 0.0  # b1's run counts, though it finished

    done = kit.reported("finished", "ns/a2", at_s=200.0)
    told = admitted(stream.run(live, done, now_s=200.0, publish=False))
    assert told == admitted(kit.Stream().run(rebuilt, done, now_s=200.0, publish=False))
    assert told == ["ns/b2"]  # team a ran 1 s..200 s, team b only 100 s..120 s
