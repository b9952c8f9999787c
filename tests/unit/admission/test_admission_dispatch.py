"""MultiKueue in admission (`admission/dispatch.py` through `AdmissionState`): dispatch from
heartbeats, decisions on the worker's subjects, facts counted only from that worker, cluster
loss, fencing, and the rebuild. Pure: the stream is a list, heartbeats are calls."""

from __future__ import annotations

from typing import Any

import pytest
from admission_stream import Stream, applied, local_queue, reported, submitted, workload

from muster.admission.__main__ import configs
from muster.admission.decisions import envelopes_of
from muster.admission.fact_reader import fact_of
from muster.admission.facts import Recorded
from muster.admission.state import AdmissionState
from muster.api.model import WorkloadKey
from muster.contracts.v1 import events_pb2 as pb
from muster.core.dispatch import ClusterCapacity, NodeRoom
from muster.core.heartbeat import ROOM_TOO_LARGE, decode_heartbeat
from muster.core.heartbeat_parts import encode_room

KUEUE = "kueue.x-k8s.io/v1beta2"
CPU = 1000
LOST_S = 10.0
A = WorkloadKey("ns/a")


def manifests(*, dispatch: str = "first-fit") -> list[dict[str, Any]]:
    return [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": KUEUE,
            "kind": "AdmissionCheck",
            "metadata": {"name": "mk"},
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "MultiKueueConfig",
                    "name": "workers",
                },
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "MultiKueueConfig",
            "metadata": {"name": "workers", "annotations": {"muster.dev/dispatch": dispatch}},
            "spec": {"clusters": ["east", "west"]},
        },
        *(
            {"apiVersion": KUEUE, "kind": "MultiKueueCluster", "metadata": {"name": name}}
            for name in ("east", "west")
        ),
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "admissionChecks": ["mk"],
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "default", "resources": [{"name": "cpu", "nominalQuota": 16}]}
                        ],
                    }
                ],
            },
        },
        local_queue(),
    ]


def capacity(cluster: str, cpu: float, *, placed: tuple[str, ...] = ()) -> ClusterCapacity:
    room = {"cpu": int(cpu * CPU), "pods": 110 * CPU}
    node = NodeRoom(name=f"{cluster}-1", allocatable=room, free=room)
    return ClusterCapacity(cluster=cluster, nodes=(node,), placed=placed)


class ClusterStream(Stream):
    """The admission stream of test_admission_state, with each event's cluster counted."""

    def run(
        self, state: AdmissionState, env: pb.Envelope, *, now_s: float = 1.0, publish: bool = True
    ) -> list[pb.Envelope]:
        if not env.sequence:
            self.append(env)
        fact = fact_of(env)
        counted = state.counted(fact, cluster=env.cluster) if fact is not None else None
        events = state.apply(counted, now_s=now_s) if counted is not None else []
        events += state.decide(now_s=now_s)
        out = envelopes_of(state.decisions(events), cause=env, source=state.source)
        if publish:
            for e in out:
                self.append(e)
            state.record_published([f for e in out if isinstance(f := fact_of(e), Recorded)])
        return out

    def tick(self, state: AdmissionState, *, now_s: float) -> list[pb.Envelope]:
        """A round with no event (a timer, or a heartbeat that may let something go)."""
        events = state.decide(now_s=now_s)
        cause = pb.Envelope(event_id=f"tick/{now_s}")
        out = envelopes_of(state.decisions(events), cause=cause, source=state.source)
        for e in out:
            self.append(e)
        state.record_published([f for e in out if isinstance(f := fact_of(e), Recorded)])
        return out

    def rebuild(self, **settings: Any) -> AdmissionState:
        state = AdmissionState(**settings)
        for env in self.log:
            state.replay(fact_of(env), sequence=env.sequence, cluster=env.cluster)
        return state


def world(**settings: Any) -> tuple[ClusterStream, AdmissionState]:
    stream = ClusterStream()
    state = AdmissionState(cluster_lost_s=LOST_S, **settings)
    state.take_ownership(now_s=0.0)
    for manifest in manifests():
        stream.run(state, applied(manifest), now_s=0.0)
    state.dispatch.heartbeat(capacity("east", 2), now_s=0.0)
    state.dispatch.heartbeat(capacity("west", 8), now_s=0.0)
    return stream, state


def said(envs: list[pb.Envelope]) -> list[tuple[str, str, str]]:
    return [(e.WhichOneof("payload") or "", e.workload, e.cluster) for e in envs]


def from_cluster(field: str, key: str, cluster: str) -> pb.Envelope:
    env = reported(field, key)
    env.cluster = cluster
    return env


def test_admits_on_the_first_worker_with_room_and_publishes_there() -> None:
    stream, state = world()
    out = stream.run(state, submitted(workload("a", cpu="2")))
    assert said(out) == [
        ("quota_reserved", "ns/a", "east"),
        ("admitted", "ns/a", "east"),
        ("admission_check", "ns/a", "east"),
    ]
    check = out[-1].admission_check
    assert (check.check, check.state) == ("mk", "Ready")
    assert check.message == "dispatched to cluster east: the first listed with room"
    # east's room is held for ns/a until east reports its pods placed: the next goes west.
    assert said(stream.run(state, submitted(workload("b", cpu="2"))))[1] == (
        "admitted",
        "ns/b",
        "west",
    )
    state.dispatch.heartbeat(capacity("east", 2, placed=("ns/a",)), now_s=1.0)
    assert state.dispatch.holds.keys() == {"ns/b"}


def test_waits_with_its_quota_and_the_reason_until_a_heartbeat_shows_room() -> None:
    stream, state = world()
    out = stream.run(state, submitted(workload("big", cpu="6")))  # not on east (2 cpu)
    assert said(out)[1] == ("admitted", "ns/big", "west")
    out = stream.run(state, submitted(workload("next", cpu="2")), now_s=2.0)
    assert said(out)[1] == ("admitted", "ns/next", "east")
    out = stream.run(state, submitted(workload("wait", cpu="3")), now_s=3.0)
    assert said(out) == [
        ("quota_reserved", "ns/wait", "local"),
        ("admission_check", "ns/wait", "local"),
    ]
    assert out[-1].admission_check.state == "Pending"
    assert out[-1].admission_check.message == (
        "no worker cluster can run it now: east: 0 of 1 pods fit; west: 0 of 1 pods fit"
    )
    assert stream.tick(state, now_s=3.5) == []  # nothing new: said once
    state.dispatch.heartbeat(capacity("east", 4, placed=("ns/next",)), now_s=4.0)
    assert state.dispatch.wants_round()
    assert said(stream.tick(state, now_s=4.0))[0] == ("admitted", "ns/wait", "east")


def test_pod_facts_count_only_from_the_cluster_it_runs_on() -> None:
    stream, state = world()
    stream.run(state, submitted(workload("a", cpu="2")))
    assert stream.run(state, from_cluster("finished", "ns/a", "west")) == []
    assert state.engine.phase(A) == "Admitted"
    stream.run(state, from_cluster("finished", "ns/a", "east"))
    assert state.engine.phase(A) is None  # finished and forgotten


def test_only_dispatch_answers_a_multikueue_check() -> None:
    stream, state = world()
    state.dispatch.heartbeat(capacity("east", 0), now_s=0.0)
    state.dispatch.heartbeat(capacity("west", 0), now_s=0.0)
    stream.run(state, submitted(workload("a")))
    ready = pb.AdmissionCheckUpdated(check="mk", state="Ready")
    assert stream.run(state, reported("admission_check", "ns/a", ready)) == []
    assert state.engine.phase(A) == "QuotaReserved"


def test_a_silent_cluster_is_lost_its_workload_evicted_completed_requeued_and_fenced() -> None:
    stream, state = world()
    stream.run(state, submitted(workload("a", cpu="2")))
    state.dispatch.heartbeat(capacity("west", 8), now_s=15.0)  # east stays silent
    assert state.next_wakeup_s() == pytest.approx(LOST_S)
    assert stream.tick(state, now_s=9.0) == []  # not yet
    out = stream.tick(state, now_s=11.0)
    assert said(out) == [("evicted", "ns/a", "east"), ("eviction_completed", "ns/a", "east")]
    assert out[0].evicted.reason == "ClusterLost"
    assert out[1].source == state.source
    # The completion admission wrote comes back: requeued and dispatched to west.
    assert said(stream.run(state, out[1], now_s=12.0)) == [
        ("requeued", "ns/a", "west"),
        ("quota_reserved", "ns/a", "west"),
        ("admitted", "ns/a", "west"),
        ("admission_check", "ns/a", "west"),
    ]
    assert state.dispatch.fenced == {"ns/a": {"east"}}
    # east returns and says things about ns/a: none counts; its binder's completion of the
    # eviction that waited for it lifts the fence.
    state.dispatch.heartbeat(capacity("east", 2), now_s=20.0)
    assert stream.run(state, from_cluster("finished", "ns/a", "east"), now_s=20.0) == []
    assert state.engine.phase(A) == "Admitted"
    stream.run(state, from_cluster("eviction_completed", "ns/a", "east"), now_s=21.0)
    assert state.dispatch.fenced == {}
    assert state.engine.phase(A) == "Admitted"


def test_a_rebuilt_replica_knows_targets_and_fences_from_the_stream() -> None:
    stream, state = world()
    stream.run(state, submitted(workload("a", cpu="2")))
    state.dispatch.heartbeat(capacity("west", 8), now_s=11.0)
    out = stream.tick(state, now_s=11.0)
    stream.run(state, out[1], now_s=12.0)
    rebuilt = stream.rebuild(cluster_lost_s=LOST_S)
    assert rebuilt.cluster_of(A) == "west"
    assert rebuilt.dispatch.fenced == {"ns/a": {"east"}}
    assert rebuilt.dispatch.configs.keys() == {"workers"}
    rebuilt.take_ownership(now_s=30.0)
    assert rebuilt.engine.phase(A) == "Admitted"


def test_best_fit_takes_the_roomiest_worker() -> None:
    stream, state = world()
    stream.run(state, applied(manifests(dispatch="best-fit")[2]))
    assert said(stream.run(state, submitted(workload("a"))))[1] == ("admitted", "ns/a", "west")


def test_cluster_lost_seconds_flag() -> None:
    _, config = configs(["--cluster-lost-seconds", "3.5"])
    assert config.cluster_lost_s == 3.5
    assert configs([])[1].cluster_lost_s == 10.0


def test_cluster_lost_seconds_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        configs(["--cluster-lost-seconds", "0"])
    assert "--cluster-lost-seconds must be > 0" in capsys.readouterr().err


def test_an_unreachable_cluster_is_passed_over_with_why_then_lost() -> None:
    stream, state = world()
    why = "API server: connection refused"
    gone = ClusterCapacity(cluster="east", unreachable=why, reason="ClientConnectionFailed")
    state.dispatch.heartbeat(gone, now_s=1.0)
    out = stream.run(state, submitted(workload("a", cpu="2")), now_s=1.0)
    assert said(out)[1] == ("admitted", "ns/a", "west")  # east is first, but does not answer
    # Its services keep saying so: that is no sign of life; past the timeout east is lost.
    state.dispatch.heartbeat(capacity("west", 8), now_s=11.0)
    state.dispatch.heartbeat(gone, now_s=11.0)
    assert state.dispatch.is_lost("east", now_s=11.0)
    state.dispatch.heartbeat(capacity("west", 0), now_s=11.0)
    out = stream.run(state, submitted(workload("b", cpu="2")), now_s=11.0)
    assert out[-1].admission_check.message == (
        f"no worker cluster can run it now: east: lost: {why}; west: 0 of 1 pods fit"
    )


def test_a_cluster_too_large_to_report_is_passed_over_with_why_and_not_lost() -> None:
    """Its gang-permit answers, with a heartbeat that says its room did not fit in a NATS
    message: what runs there runs on; nothing new goes there."""
    stream, state = world()
    stream.run(state, submitted(workload("a", cpu="2")), now_s=1.0)  # on east
    node = capacity("east", 2).nodes[0]
    nodes = tuple(NodeRoom(name=f"east-{i}", allocatable=node.allocatable) for i in range(2000))
    room = ClusterCapacity(cluster="east", nodes=nodes, placed=("ns/a",))
    heartbeat = encode_room(room, max_bytes=500)
    why = heartbeat.too_large
    too_large = decode_heartbeat(heartbeat.head, key="east")
    assert (too_large.reason, too_large.nodes, too_large.placed) == (ROOM_TOO_LARGE, (), ("ns/a",))
    for now_s in (1.0, 6.0, 11.0, 16.0):  # heard every 5 s, past the 10 s timeout
        state.dispatch.heartbeat(too_large, now_s=now_s)
        state.dispatch.heartbeat(capacity("west", 0), now_s=now_s)
        assert stream.tick(state, now_s=now_s) == []
    assert not state.dispatch.is_lost("east", now_s=16.0)
    assert state.engine.phase(A) == "Admitted"
    out = stream.run(state, submitted(workload("b", cpu="2")), now_s=16.0)
    assert out[-1].admission_check.message == (
        f"no worker cluster can run it now: east: its room is not known: {why}; "
        "west: 0 of 1 pods fit"
    )
    assert "messages of the 500 bytes NATS takes in one (max_payload)" in why


def test_a_workload_goes_only_where_its_namespace_exists() -> None:
    stream, state = world()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}
    east = applied(namespace)
    east.cluster = "east"
    stream.run(state, east)
    out = stream.run(state, submitted(workload("a", cpu="2")))
    assert said(out)[1] == ("admitted", "ns/a", "west")  # east has no namespace ns
    state.dispatch.heartbeat(capacity("west", 0), now_s=1.0)
    out = stream.run(state, submitted(workload("b", cpu="1")), now_s=1.0)
    assert out[-1].admission_check.message == (
        "no worker cluster can run it now: east: namespace ns does not exist there; "
        "west: 0 of 1 pods fit"
    )


def test_a_worker_that_refuses_to_create_it_is_passed_over_and_it_goes_elsewhere() -> None:
    stream, state = world()
    stream.run(state, submitted(workload("a", cpu="2")))
    refusal = pb.GangRejected(reason="StartFailed", message="cluster east: forbidden")
    out = stream.run(state, from_cluster_payload(refusal, "east"), now_s=2.0)
    assert said(out) == [("evicted", "ns/a", "east"), ("admission_check", "ns/a", "east")]
    assert out[0].evicted.reason == "AdmissionCheck"
    assert (out[1].admission_check.state, out[1].admission_check.message) == (
        "Retry",
        "cluster east: forbidden",
    )
    out = stream.run(state, from_cluster("eviction_completed", "ns/a", "east"), now_s=3.0)
    assert said(out)[2] == ("admitted", "ns/a", "west")
    assert out[-1].admission_check.message == (
        "dispatched to cluster west: the first listed with room; "
        "not east: refused it (cluster east: forbidden)"
    )


def from_cluster_payload(payload: pb.GangRejected, cluster: str) -> pb.Envelope:
    env = reported("gang_rejected", "ns/a", payload)
    env.cluster = cluster
    return env
