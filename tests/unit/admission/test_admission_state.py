"""AdmissionState: live rounds, the rebuild from the stream, duplicates and shard moves."""

from __future__ import annotations

from admission_stream import (
    Stream,
    applied,
    cluster_queue,
    flavor,
    local_queue,
    reported,
    submitted,
    workload,
)

from muster.admission.fact_reader import fact_of
from muster.admission.shards import shard_of
from muster.admission.state import AdmissionState
from muster.api.model import WorkloadKey
from muster.bus import new_event
from muster.contracts.v1 import events_pb2 as pb


def configured(
    stream: Stream, state: AdmissionState, *, cpu: str = "4", preempt: bool = False
) -> None:
    for manifest in (flavor(), cluster_queue(cpu=cpu, preempt=preempt), local_queue()):
        stream.run(state, applied(manifest))


def owning(**settings: object) -> AdmissionState:
    state = AdmissionState(**settings)  # type: ignore[arg-type]
    state.take_ownership(now_s=0.0)
    return state


def kinds(envs: list[pb.Envelope]) -> list[tuple[str, str]]:
    return [(e.WhichOneof("payload") or "", e.workload) for e in envs]


def test_round_reserves_admits_and_pends_with_kueues_message() -> None:
    stream, state = Stream(), owning()
    configured(stream, state)
    assert kinds(stream.run(state, submitted(workload("a", cpu="3")))) == [
        ("admitted", "ns/a"),
    ]
    (pending,) = stream.run(state, submitted(workload("b", cpu="2")))
    assert pending.pending.reason == "WaitingForQuota"
    assert pending.pending.message.endswith(
        "insufficient unused quota for cpu in flavor default, 1 more needed"
    )
    assert kinds(stream.run(state, reported("finished", "ns/a"))) == [
        ("admitted", "ns/b"),
    ]


def test_duplicate_submission_with_another_id_changes_nothing() -> None:
    stream, state = Stream(), owning()
    configured(stream, state)
    stream.run(state, submitted(workload("a")))
    assert stream.run(state, submitted(workload("a"))) == []
    assert len(state.ledger) == 1


def test_every_new_workload_gets_an_answer_even_behind_a_parked_head() -> None:
    stream, state = Stream(), owning()
    configured(stream, state, cpu="1")
    stream.run(state, submitted(workload("a")))
    stream.run(state, submitted(workload("b")))
    (c,) = stream.run(state, submitted(workload("c")))  # same group as b, behind it
    assert (c.WhichOneof("payload"), c.workload) == ("pending", "ns/c")
    assert "insufficient unused quota" in c.pending.message


def test_rebuild_from_the_stream_ends_where_the_live_replica_was() -> None:
    stream, live = Stream(), owning()
    configured(stream, live, cpu="4", preempt=True)
    stream.run(live, submitted(workload("low", cpu="3", priority=0)))
    stream.run(live, submitted(workload("mid", cpu="1", priority=0)))
    out = stream.run(live, submitted(workload("urgent", cpu="3", priority=10), at_s=2))
    assert ("preemption_requested", "ns/urgent") in kinds(out)
    assert ("evicted", "ns/low") in kinds(out)

    rebuilt = stream.rebuild()
    assert rebuilt.take_ownership(now_s=20.0) == []  # everything was decided already
    for key in ("ns/low", "ns/mid", "ns/urgent"):
        k = WorkloadKey(key)
        assert rebuilt.engine.holds_quota(k) == live.engine.holds_quota(k), key
    assert rebuilt.engine.cluster_queue_status("cq") == live.engine.cluster_queue_status("cq")

    # The victim's pods stop: both replicas admit the preemptor the same way.
    done = reported("eviction_completed", "ns/low")
    assert kinds(stream.run(live, done, publish=False)) == kinds(
        Stream().run(rebuilt, done, publish=False)
    )


def test_decisions_about_a_deleted_workload_do_not_admit_the_one_submitted_after_it() -> None:
    stream, live = Stream(), owning()
    configured(stream, live, cpu="2")
    first = stream.append(submitted(workload("a", cpu="1")))
    deleted = stream.append(reported("deleted", "ns/a"))
    again = stream.append(submitted(workload("a", cpu="3"), at_s=2))  # more than the quota
    # The replica decides about the first `a` before it reads the rest: stored after them.
    assert kinds(stream.run(live, first)) == [("admitted", "ns/a")]
    stream.run(live, deleted)
    assert kinds(stream.run(live, again)) == [("pending", "ns/a")]

    rebuilt = stream.rebuild()
    assert rebuilt.take_ownership(now_s=20.0) == []
    key = WorkloadKey("ns/a")
    assert rebuilt.ledger.entries[key].phase == "Pending"
    assert rebuilt.engine.phase(key) == live.engine.phase(key) == "Pending"
    assert not rebuilt.engine.holds_quota(key)


def test_rebuilt_preemptor_waits_for_its_victim_instead_of_preempting_again() -> None:
    stream, live = Stream(), owning()
    configured(stream, live, cpu="4", preempt=True)
    stream.run(live, submitted(workload("a", cpu="2")))
    stream.run(live, submitted(workload("b", cpu="2")))
    out = stream.run(live, submitted(workload("urgent", cpu="2", priority=10), at_s=2))
    (victim,) = [e.workload for e in out if e.WhichOneof("payload") == "evicted"]

    rebuilt = stream.rebuild()
    # The other low-priority workload could make room too: it is not preempted as well.
    assert rebuilt.take_ownership(now_s=20.0) == []
    assert kinds(stream.run(rebuilt, reported("eviction_completed", victim))) == [
        ("requeued", victim),
        ("admitted", "ns/urgent"),
        ("pending", victim),
    ]


def test_finished_and_deleted_workloads_leave_the_engine() -> None:
    stream, state = Stream(), owning()
    configured(stream, state)
    for i in range(200):
        stream.run(state, submitted(workload(f"w{i}")))
        done = "finished" if i % 2 else "deleted"
        assert stream.run(state, reported(done, f"ns/w{i}")) == []
    assert len(state.engine.records) == 0
    assert state.adopted == set()
    assert len(state.ledger) == 0
    # Redelivered under new ids, they change nothing.
    assert stream.run(state, reported("finished", "ns/w1")) == []
    assert stream.run(state, submitted(workload("w1"))) == []
    assert state.engine.records == {}


def test_a_finished_workload_is_forgotten_only_after_its_round_is_translated() -> None:
    stream, state = Stream(), owning()
    configured(stream, state)
    stream.run(state, submitted(workload("a")))
    fact = fact_of(reported("finished", "ns/a"))
    assert fact is not None
    events = state.apply(fact, now_s=10.0) + state.decide(now_s=10.0)
    key = WorkloadKey("ns/a")
    assert state.engine.phase(key) == "Finished"  # its round's events may still need it
    state.decisions(events)
    assert state.engine.phase(key) is None


def test_rebuild_decides_what_a_dead_replica_never_published() -> None:
    stream, live = Stream(), owning()
    configured(stream, live)
    stream.run(live, submitted(workload("a", cpu="2")))
    lost = stream.run(live, submitted(workload("b", cpu="2")), publish=False)
    assert kinds(lost) == [("admitted", "ns/b")]

    rebuilt = stream.rebuild()
    caught_up = rebuilt.take_ownership(now_s=20.0)
    assert [(e.type, e.object) for e in caught_up] == [
        ("QuotaReserved", "ns/b"),
        ("Admitted", "ns/b"),
    ]
    assert not rebuilt.engine.holds_quota(WorkloadKey("ns/c"))


def test_rebuild_restores_pending_reasons_without_announcing_them_again() -> None:
    stream, live = Stream(), owning()
    configured(stream, live, cpu="1")
    stream.run(live, submitted(workload("a")))
    stream.run(live, submitted(workload("b")))
    rebuilt = stream.rebuild()
    assert rebuilt.take_ownership(now_s=20.0) == []


def test_gang_rejected_evicts_an_admitted_workload_once() -> None:
    stream, state = Stream(), owning()
    configured(stream, state)
    stream.run(state, submitted(workload("g")))
    rejected = pb.GangRejected(reason="GangTimedOut", message="2 of 3 placed")
    (evicted,) = stream.run(state, reported("gang_rejected", "ns/g", rejected))
    assert (evicted.evicted.reason, evicted.evicted.message) == (
        "GangRejected",
        "GangTimedOut: 2 of 3 placed",
    )
    assert stream.run(state, reported("gang_rejected", "ns/g", rejected)) == []
    assert state.engine.holds_quota(WorkloadKey("ns/g"))  # until its pods are gone
    assert kinds(stream.run(state, reported("eviction_completed", "ns/g")))[0] == (
        "requeued",
        "ns/g",
    )


def test_a_failed_bind_leaves_the_workload_admitted_for_gangpermit_to_retry() -> None:
    stream, state = Stream(), owning()
    configured(stream, state)
    stream.run(state, submitted(workload("g")))
    failed = pb.GangRejected(reason="BindFailed", message="pod ns/g-main-0 to node n1: gone")
    assert stream.run(state, reported("gang_rejected", "ns/g", failed)) == []
    assert state.engine.phase(WorkloadKey("ns/g")) == "Admitted"


def test_placement_preemption_evicts_the_kueue_victims_and_skips_the_others() -> None:
    stream, state = Stream(), owning()
    configured(stream, state)
    stream.run(state, submitted(workload("low")))
    preempted = pb.PlacementPreempted(victims=["ns/low", "ns/bare-pod"])
    (evicted,) = stream.run(state, reported("placement_preempted", "ns/big/workers", preempted))
    assert (evicted.workload, evicted.evicted.reason) == ("ns/low", "Preempted")
    assert "ns/big/workers" in evicted.evicted.message
    assert stream.run(state, reported("placement_preempted", "ns/big/workers", preempted)) == []


def test_deleting_a_cluster_queue_leaves_its_workloads_waiting() -> None:
    stream, state = Stream(), owning()
    configured(stream, state)
    deleted = pb.ConfigDeleted(kind="ClusterQueue", name="cq")
    from muster.bus import new_event

    stream.run(state, new_event("config_deleted", deleted, cluster="local", source="test"))
    (pending,) = stream.run(state, submitted(workload("x")))
    assert pending.pending.message == "ClusterQueue cq doesn't exist"


def test_deleting_a_local_queue_leaves_its_new_workloads_waiting() -> None:
    stream, state = Stream(), owning()
    configured(stream, state)
    deleted = pb.ConfigDeleted(kind="LocalQueue", name="ns/lq")
    stream.run(state, new_event("config_deleted", deleted, cluster="local", source="test"))
    (pending,) = stream.run(state, submitted(workload("x")))
    assert pending.pending.message == "LocalQueue lq doesn't exist"


def test_each_shard_decides_only_its_own_tree_and_adopts_moved_workloads() -> None:
    assert shard_of("cohort/alpha", shards=2) == 1
    assert shard_of("cohort/beta", shards=2) == 0
    stream = Stream()
    shards = [owning(shard=i, shards=2, source=f"admission/{i}") for i in (0, 1)]

    def everywhere(env: pb.Envelope) -> list[pb.Envelope]:
        """Every replica reads every event, its own decisions and the other's."""
        out: list[pb.Envelope] = []
        for state in shards:
            out += stream.run(state, env)
        for state in shards:
            for decision in out:
                fact = fact_of(decision)
                assert fact is not None
                state.apply(fact, now_s=10.0)
        return out

    for manifest in (
        flavor(),
        cluster_queue("cq-alpha", cohort="alpha"),
        cluster_queue("cq-beta", cohort="beta"),
        local_queue("lq", cq="cq-beta"),
    ):
        everywhere(applied(manifest))
    decided = everywhere(submitted(workload("w")))
    assert [(e.source, e.WhichOneof("payload")) for e in decided] == [
        ("admission/0", "admitted"),
    ]
    assert shards[0].adopted == {"ns/w"}
    assert shards[1].adopted == set()

    # The LocalQueue now points into tree alpha: shard 1 adopts w, holding its quota as
    # recorded; shard 0 lets it go.
    everywhere(applied(local_queue("lq", cq="cq-alpha")))
    assert shards[0].adopted == set()
    assert shards[1].adopted == {"ns/w"}
    assert shards[1].engine.holds_quota(WorkloadKey("ns/w"))
    assert not shards[0].engine.holds_quota(WorkloadKey("ns/w"))
    assert kinds(stream.of("admitted")) == [("admitted", "ns/w")]  # told once


def test_a_stopped_workload_stays_inactive_through_a_rebuild_and_resumes_after_it() -> None:
    stream, live = Stream(), owning()
    configured(stream, live, cpu="4")
    stream.run(live, submitted(workload("a", cpu="3")))
    stop = pb.WorkloadActiveChanged(active=False)
    (evicted,) = stream.run(live, reported("active_changed", "ns/a", stop))
    assert (evicted.evicted.reason, live.engine.holds_quota(WorkloadKey("ns/a"))) == (
        "Deactivated",
        True,
    )
    assert stream.run(live, reported("eviction_completed", "ns/a")) == []  # not requeued
    waiting = stream.run(live, submitted(workload("b", cpu="3")))
    assert kinds(waiting) == [("admitted", "ns/b")]

    rebuilt = stream.rebuild()
    assert rebuilt.take_ownership(now_s=20.0) == []
    assert rebuilt.engine.phase(WorkloadKey("ns/a")) == "Inactive"
    resume = reported("active_changed", "ns/a", pb.WorkloadActiveChanged(active=True))
    out = stream.run(rebuilt, resume)
    assert [(e.WhichOneof("payload"), e.workload) for e in out][:1] == [("requeued", "ns/a")]
    assert out[0].requeued.reason == "Reactivated"
