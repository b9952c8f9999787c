"""gangpermit.state and .decisions: facts from the cluster and the stream, one pass as events.

No NATS here: cluster objects come decoded from YAML, events are built as the other services
publish them, and a "restart" is a new state fed the same stream and cluster.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from cluster_docs import (
    GANG,
    event,
    fed,
    gang,
    kueue_workload,
    looked_up,
    node,
    objects,
    pod,
)

from muster.contracts.v1 import events_pb2
from muster.core.placement.model import GangKey, PodKey
from muster.gangpermit.translate import decide

GANG_POD = PodKey("ns/train-0")


def test_gang_that_fits_is_permitted_whole_with_every_pod_and_its_uid() -> None:
    state = fed(node("a") + gang(pods=2))

    (permit,) = decide(state, now_s=10.0)

    assert (permit.type, permit.workload) == ("workload.gang_permitted", GANG)
    assert [(b.pod.name, b.pod.uid, b.node) for b in permit.gang_permitted.bindings] == [
        ("train-0", "uid-train-0", "a"),
        ("train-1", "uid-train-1", "a"),
    ]
    assert decide(state, now_s=11.0) == []


def test_waiting_reason_is_published_once_until_it_changes() -> None:
    state = fed(node("a", cpu="1") + gang(pods=2))

    (waiting,) = decide(state, now_s=10.0)
    assert waiting.type == "workload.gang_waiting"
    assert (waiting.gang_waiting.pending, waiting.gang_waiting.min_count) == (2, 2)
    assert waiting.gang_waiting.reason.startswith("1 of 2 pods fit")
    state.put(objects(pod("train-1", workload="train"))[0])  # seen again, unchanged
    assert decide(state, now_s=11.0) == []
    state.put(objects(node("b", cpu="0"))[0])  # another node: the reason changes
    (again,) = decide(state, now_s=12.0)
    assert (
        again.gang_waiting.reason == "1 of 2 pods fit: 0/2 nodes are available: 2 Insufficient cpu"
    )
    assert again.event_id != waiting.event_id


def test_a_pass_repeated_after_a_crash_publishes_the_same_event_ids() -> None:
    cluster = node("a") + gang(pods=2) + node("b", cpu="1") + gang("big", pods=3)
    before = decide(fed(cluster), now_s=10.0)
    again = decide(fed(cluster), now_s=12.0)  # nothing of the first pass reached the stream

    assert [e.type for e in before] == ["workload.gang_permitted", "workload.gang_waiting"]
    assert [e.event_id for e in again] == [e.event_id for e in before]


def test_restored_permit_holds_its_node_until_the_binder_answers() -> None:
    cluster = node("a") + gang(pods=2)
    (permit,) = decide(fed(cluster), now_s=10.0)
    permit.sequence = 1

    # "zz" sorts after "train": with equal priority and creation, the first gang goes first.
    restarted = fed(cluster + gang("zz", pods=1), stream=[permit])
    (waiting,) = decide(restarted, now_s=11.0)
    assert (waiting.type, waiting.workload) == ("workload.gang_waiting", "ns/zz/workers")
    assert "Insufficient cpu" in waiting.gang_waiting.reason

    refused = event(
        "gang_rejected",
        events_pb2.GangRejected(reason="BindFailed", message="refused"),
        workload=GANG,
        cause=permit,
    )
    refused.sequence = 2
    restarted.apply_event(refused)
    (again,) = decide(restarted, now_s=12.0)  # room freed: the first gang goes again, whole
    assert (again.type, again.workload) == ("workload.gang_permitted", GANG)
    assert again.event_id != permit.event_id
    assert len(again.gang_permitted.bindings) == 2


def test_bound_pods_of_a_restored_permit_keep_their_room() -> None:
    cluster = node("a") + gang(pods=2)
    (permit,) = decide(fed(cluster), now_s=10.0)
    permit.sequence = 1
    bound = event("bound", events_pb2.PodsBound(), workload=GANG, cause=permit)
    bound.sequence = 2
    now = [
        *node("a"),
        *gang(pods=0, min_count=2),
        *pod("train-0", workload="train", node_name="a"),
        *pod("train-1", workload="train", node_name="a"),
        *gang("second", pods=1),
    ]

    (waiting,) = decide(fed(now, stream=[permit, bound]), now_s=11.0)

    assert (waiting.type, waiting.workload) == ("workload.gang_waiting", "ns/second/workers")


def test_gang_timed_out_before_a_restart_stays_rejected_until_one_of_its_pods_changes() -> None:
    cluster = node("a", cpu="1") + gang(pods=2)
    state = fed(cluster)
    stream = decide(state, now_s=0.0)  # waiting
    stream += decide(state, now_s=301.0)  # the default timeout
    assert [e.type for e in stream] == ["workload.gang_waiting", "workload.gang_rejected"]
    for n, env in enumerate(stream, start=1):
        env.sequence = n

    restarted = fed(cluster, stream=stream)
    assert decide(restarted, now_s=302.0) == []
    assert restarted.scheduler.next_deadline_s() is None

    restarted.put(objects(pod("train-1", workload="train", uid="recreated"))[0])
    (waiting,) = decide(restarted, now_s=303.0)  # a new try, with a new deadline
    assert waiting.type == "workload.gang_waiting"
    assert restarted.scheduler.next_deadline_s() == 603.0


JOB_MANIFEST = {
    "apiVersion": "kueue.x-k8s.io/v1beta1",
    "kind": "Workload",
    "metadata": {"name": "job", "namespace": "ns"},
    "spec": {
        "queueName": "q",
        "podSets": [
            {
                "name": "main",
                "count": 3,
                "minCount": 2,
                "template": {"spec": {"containers": [{"name": "c"}]}},
            }
        ],
    },
}


def job_admitted(*, manifest_json: str = "") -> events_pb2.Envelope:
    assignment = events_pb2.PodSetAssignment(name="main", count=3)
    admission = events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    payload = events_pb2.WorkloadAdmitted(admission=admission, manifest_json=manifest_json)
    return event("admitted", payload, workload="ns/job")


def test_kueue_workload_is_one_gang_of_its_admitted_pods_with_min_count() -> None:
    submitted = event(
        "submitted",
        events_pb2.WorkloadSubmitted(manifest_json=json.dumps(JOB_MANIFEST), priority=5),
        workload="ns/job",
    )
    admitted = job_admitted()
    state = fed(node("a", cpu="2"))
    state.apply_event(submitted)
    started = [pod(f"job-main-{i}", labels={"muster.dev/workload": "job"})[0] for i in range(3)]
    for obj in objects(started):  # the binder's pods can reach the watch before `admitted`
        state.put(obj)
    assert decide(state, now_s=0.5) == []  # no "waiting for its Workload" for a Kueue job
    assert state.apply_event(admitted)

    permit, left = decide(state, now_s=1.0)

    assert (permit.workload, permit.cause) == ("ns/job", admitted.event_id)
    assert len(permit.gang_permitted.bindings) == 2  # minCount of 3 fit on 2 cpu
    # The third pod waits on its own, as any pod that joins a permitted gang.
    assert (left.type, left.workload) == ("workload.gang_waiting", "ns/job-main-2")


def test_a_submitted_manifest_is_read_only_once_the_workload_is_admitted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Gang-permit follows every cluster's `submitted`; one never admitted here (another
    cluster's, or deleted while pending) is kept as published, not read."""
    state = fed(node("a", cpu="2"))
    broken = events_pb2.WorkloadSubmitted(manifest_json='{"kind": 3}')
    state.apply_event(event("submitted", broken, workload="ns/elsewhere"))
    state.apply_event(event("deleted", events_pb2.WorkloadDeleted(), workload="ns/elsewhere"))
    submitted = events_pb2.WorkloadSubmitted(manifest_json=json.dumps(JOB_MANIFEST), priority=5)
    state.apply_event(event("submitted", submitted, workload="ns/job"))
    assert "undecodable" not in caplog.text

    state.apply_event(job_admitted())

    assert state.admitted["ns/job"].spec.min_count == 2  # the manifest's minCount, read now
    assert state.admitted["ns/job"].spec.priority == 5


def test_without_its_submitted_a_gang_takes_min_count_from_the_admissions_copy() -> None:
    # Restarted after the submitted left the stream: only the admission tells the spec.
    started = [pod(f"job-main-{i}", labels={"muster.dev/workload": "job"})[0] for i in range(3)]
    copied = fed(node("a", cpu="2"))
    bare = fed(node("a", cpu="2"))
    for state, admitted in (
        (copied, job_admitted(manifest_json=json.dumps(JOB_MANIFEST))),
        (bare, job_admitted()),
    ):
        for obj in objects(started):
            state.put(obj)
        assert state.apply_event(admitted)

    permit, _ = decide(copied, now_s=1.0)
    assert len(permit.gang_permitted.bindings) == 2  # minCount, from the copy
    # Without a spec the gang is all 3 admitted pods, which 2 cpu cannot hold.
    assert [e.type for e in decide(bare, now_s=1.0)] == ["workload.gang_waiting"]


def test_a_pod_bound_where_it_was_permitted_or_running_there_wakes_no_pass() -> None:
    state = fed(node("a") + gang(pods=2))
    (permit,) = decide(state, now_s=10.0)
    nodes = {b.pod.name: b.node for b in permit.gang_permitted.bindings}

    bound = objects(pod("train-0", workload="train", node_name=nodes["train-0"]))[0]
    assert state.put(bound) is False  # the room was the permit's already
    running = objects(pod("train-0", workload="train", node_name=nodes["train-0"]))[0]
    running = msgspec.structs.replace(running, phase="Running")
    assert state.put(running) is False
    elsewhere = objects(pod("train-1", workload="train", node_name="b"))[0]
    assert state.put(elsewhere) is True  # bound by someone else, not where permitted
    assert state.put(objects(pod("new", workload="train"))[0]) is True
    done = msgspec.structs.replace(running, phase="Succeeded")
    assert state.put(done) is True  # its room is free


def test_a_bound_pod_that_starts_running_is_kept_without_asking_the_scheduler_again() -> None:
    state = fed(node("a") + gang(pods=1))
    (permit,) = decide(state, now_s=10.0)
    node_name = permit.gang_permitted.bindings[0].node
    bound = objects(pod("train-0", workload="train", node_name=node_name))[0]
    state.put(bound)
    asked: list[object] = []
    state.scheduler.upsert_pod = asked.append  # type: ignore[method-assign,assignment]

    running = msgspec.structs.replace(bound, phase="Running")
    assert state.put(running) is False

    assert state.pods[GANG_POD] == running
    assert asked == []  # nothing placement reads changed
    done = msgspec.structs.replace(running, phase="Succeeded")
    assert state.put(done) is True  # its room is free: the scheduler is told
    assert GANG_POD not in state.pods


def test_a_pod_bound_where_permitted_keeps_its_gang_without_looking_it_up_again() -> None:
    state = fed(node("a") + gang(pods=2))
    (permit,) = decide(state, now_s=10.0)
    nodes = {b.pod.name: b.node for b in permit.gang_permitted.bindings}
    looked = looked_up(state)
    for name in ("train-0", "train-1"):
        bound = objects(pod(name, workload="train", node_name=nodes[name]))[0]
        assert state.put(bound) is False

    assert looked == []  # the gang each was permitted in still holds
    assert GangKey(GANG) not in state.permits  # every permitted pod is bound: answered
    for name in ("train-0", "train-1"):
        info = state.infos[PodKey(f"ns/{name}")]
        assert (info.gang, info.node) == (GANG, nodes[name])
        assert state.scheduler.node_of(PodKey(f"ns/{name}")) == nodes[name]
    status = state.scheduler.gang_status(GangKey(GANG))
    assert status is not None
    assert (status.phase, status.pending) == ("Permitted", 0)
    # Bound by another scheduler elsewhere: looked up as any new placement is.
    state.put(objects(pod("other", workload="train", node_name="a"))[0])
    assert len(looked) == 1


def test_heartbeat_looks_again_only_at_gangs_that_changed_and_agrees_with_a_full_look() -> None:
    state = fed(node("a", cpu="8"))
    for name in ("one", "two", "three"):
        for env in kueue_workload(name, 2):
            state.apply_event(env)
        for i in range(2):
            state.put(objects(pod(f"{name}-main-{i}", labels={"muster.dev/workload": name}))[0])
    assert state.capacity().placed == ()
    decide(state, now_s=1.0)
    assert state.capacity().placed == ("ns/one", "ns/three", "ns/two")
    state.remove(objects(pod("two-main-1", labels={"muster.dev/workload": "two"}))[0])
    state.apply_event(event("finished", events_pb2.WorkloadFinished(), workload="ns/three"))

    placed = state.capacity().placed
    state.touch_all()
    assert placed == state.capacity().placed == ("ns/one",)


def test_an_admission_wakes_a_pass_only_once_its_pods_are_seen() -> None:
    state = fed(node("a", cpu="8"))
    submitted, admitted = kueue_workload("job", 2)
    assert state.apply_event(submitted) is False
    assert state.apply_event(admitted) is False  # no pod yet: nothing to decide
    state.put(objects(pod("job-main-0", labels={"muster.dev/workload": "job"}))[0])
    state.put(objects(pod("job-main-1", labels={"muster.dev/workload": "job"}))[0])
    readmitted = events_pb2.Envelope()
    readmitted.CopyFrom(admitted)
    readmitted.event_id = "again"
    assert state.apply_event(readmitted) is True  # its pods are there: their gang changed
    finished = event("finished", events_pb2.WorkloadFinished(), workload="ns/other")
    assert state.apply_event(finished) is False  # no pod of it here


def test_a_late_completion_of_an_earlier_eviction_keeps_the_admission_held_now() -> None:
    state = fed(node("a", cpu="2"))
    readmitted = job_admitted()
    readmitted.sequence = 20
    state.apply_event(readmitted)

    def completed(eviction: int, *, at: int) -> events_pb2.Envelope:
        payload = events_pb2.EvictionCompleted(
            eviction_id=f"e{eviction}", eviction_sequence=eviction
        )
        env = event("eviction_completed", payload, workload="ns/job")
        env.sequence = at
        return env

    state.apply_event(completed(12, at=25))
    assert "ns/job" in state.admitted  # the binder left this admission's pods alone
    state.apply_event(completed(22, at=26))
    assert "ns/job" not in state.admitted


def test_an_answer_to_a_placement_eviction_of_pods_ends_no_kueue_admission() -> None:
    state = fed(node("a", cpu="2"))
    admitted = job_admitted()
    admitted.sequence = 20
    state.apply_event(admitted)

    # One part of gang-permit's eviction of pods outside Kueue owned under the same key.
    payload = events_pb2.EvictionCompleted(pods=300, part=0, parts=3, command_id="c")
    answer = event("eviction_completed", payload, workload="ns/job")
    answer.sequence = 25

    assert state.apply_event(answer) is False
    assert "ns/job" in state.admitted


def test_a_restored_permit_of_an_evicted_admission_holds_nothing_for_the_next_one() -> None:
    # Admitted, permitted, evicted before the binder answered; admitted again, its pods made
    # again under the same names. A gang-permit restarted now must place the new pods.
    first = kueue_workload("w", 1)
    pods = pod("w-main-0", labels={"muster.dev/workload": "w"}, uid="old")
    state = fed(node("a"), stream=first)
    for obj in objects(pods):
        state.put(obj)
    (permit,) = decide(state, now_s=1.0)
    evicted = event("eviction_completed", events_pb2.EvictionCompleted(), workload="ns/w")
    again = event("admitted", first[1].admitted, workload="ns/w")
    stream = [*first, permit, evicted, again]
    for seq, env in enumerate(stream, start=1):
        env.sequence = seq

    restarted = fed(node("a") + pod("w-main-0", labels={"muster.dev/workload": "w"}, uid="new"),
                    stream=stream)  # fmt: skip
    (placed,) = decide(restarted, now_s=2.0)
    assert placed.type == "workload.gang_permitted"
    assert [b.pod.uid for b in placed.gang_permitted.bindings] == ["new"]


def test_a_pod_of_a_parked_gang_that_goes_away_leaves_the_gang() -> None:
    """A gang that timed out before a restart stays parked, its pods held outside the feed;
    one of them deleted unparks it, and only the pods still there become its members (a
    ghost member would count toward its quorum)."""
    timed_out = event(
        "gang_rejected",
        events_pb2.GangRejected(
            reason="GangTimedOut",
            message="timed out",
            pods=[
                events_pb2.PodRef(namespace="ns", name=f"train-{i}", uid=f"uid-train-{i}")
                for i in range(3)
            ],
        ),
        workload=GANG,
    )
    timed_out.sequence = 1
    cluster = node("a", cpu="1") + gang(pods=3, min_count=2)
    state = fed(cluster, stream=[timed_out])
    assert decide(state, now_s=10.0) == []  # parked: nothing tried

    (gone,) = objects([d for d in cluster if d["metadata"]["name"] == "train-2"])
    state.remove(gone)
    assert sorted(state.feed.members[GangKey(GANG)]) == ["ns/train-0", "ns/train-1"]


def test_a_permit_is_answered_once_every_pod_is_bound_whatever_the_order_of_the_binds() -> None:
    state = fed(node("a", cpu="3") + gang(pods=3))
    (permit,) = decide(state, now_s=10.0)
    nodes = {b.pod.name: b.node for b in permit.gang_permitted.bindings}

    def bound(name: str) -> Any:
        return objects(pod(name, workload="train", node_name=nodes[name]))[0]

    state.put(bound("train-2"))
    state.put(bound("train-0"))
    state.remove(bound("train-0"))  # seen bound, then gone before the last bind
    state.put(bound("train-1"))
    assert GangKey(GANG) in state.permits  # train-0 is not bound any more: not answered
    state.put(bound("train-0"))
    assert GangKey(GANG) not in state.permits
