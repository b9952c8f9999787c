"""gangpermit.state: a Kueue workload's pod placed before it exists, then made by the binder on
its node (docs/events.md, "Pods created on their nodes"). Made as placed, it is a bind seen:
no membership looked up, no pass woken; made otherwise, it is a new pod like any other.
"""

from __future__ import annotations

from typing import Any

import pytest
from cluster_docs import Doc, event, kueue_workload, looked_up, node, objects

from muster.contracts.v1 import events_pb2
from muster.core.placement.model import GangKey, NodeName, PodKey
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide

TRAIN = GangKey("ns/train")
POD = PodKey("ns/train-main-0")
ADMISSION = 7  # the `admitted` event's stream sequence
CREATED = "2026-11-27T09:00:00Z"
CREATED_S = 1795770000.0


def made(
    *, node_name: str, admission: int = ADMISSION, cpu: str = "1", phase: str = "Pending"
) -> Doc:
    """Pod 0 of podset `main` of Workload ns/train, as the binder creates it on its node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-main-0",
            "namespace": "ns",
            "uid": "uid-made",
            "creationTimestamp": CREATED,
            "labels": {"muster.dev/workload": "train", "muster.dev/admission": str(admission)},
            "annotations": {
                "muster.dev/pod-set": "main",
                "muster.dev/partition": "3",  # for the watcher's events about it
                "muster.dev/traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            },
            "ownerReferences": [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "Workload",
                    "name": "train",
                    "uid": "uid-train",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "schedulerName": "muster",
            "nodeName": node_name,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": phase},
    }


def placed() -> tuple[GangPermitState, str, list[Any]]:
    """A state whose one-pod Kueue gang is permitted before its pod exists; the node it is
    placed on; and the pods whose membership is looked up from then on."""
    state = GangPermitState(cluster="local", creates_on_nodes=lambda owner_kind: True)
    state.restored()
    for obj in objects(node("a") + node("b")):
        state.put(obj)
    submitted, admitted = kueue_workload("train", 1)
    submitted.sequence, admitted.sequence = ADMISSION - 1, ADMISSION
    state.apply_event(submitted)
    assert state.apply_event(admitted)  # its pod to create is placed at once
    (permit,) = decide(state, now_s=10.0)
    assert (permit.gang_permitted.create, permit.gang_permitted.admission_sequence) == (
        True,
        ADMISSION,
    )
    (binding,) = permit.gang_permitted.bindings
    return state, binding.node, looked_up(state)


def test_a_pod_made_on_the_node_it_was_placed_on_is_a_bind_seen() -> None:
    state, on, looked = placed()

    assert state.put(objects([made(node_name=on)])[0]) is False  # no room or gang changed

    assert looked == []  # the gang it was placed in holds
    info = state.infos[POD]
    assert (info.gang, info.node, info.created_s) == (TRAIN, on, CREATED_S)  # its own time
    assert state.scheduler.node_of(POD) == on
    assert state.pods[POD].meta.uid == "uid-made"  # named by its uid in later events
    assert state.member_uids.digest(TRAIN) == fed_again(on).member_uids.digest(TRAIN)
    assert not state.unmade.of(TRAIN)  # made
    assert TRAIN not in state.permits  # every permitted pod is bound: answered
    status = state.scheduler.gang_status(TRAIN)
    assert status is not None
    assert (status.phase, status.pending) == ("Permitted", 0)


def fed_again(on: str) -> GangPermitState:
    """A state that reads the same stream and the made pod (a restart): the full path."""
    state = GangPermitState(cluster="local", creates_on_nodes=lambda owner_kind: True)
    submitted, admitted = kueue_workload("train", 1)
    submitted.sequence, admitted.sequence = ADMISSION - 1, ADMISSION
    state.apply_event(submitted)
    state.apply_event(admitted)
    state.restored()
    for obj in objects(node("a") + node("b") + [made(node_name=on)]):
        state.put(obj)
    return state


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"cpu": "2"}, "requests other than those placed"),
        ({"admission": ADMISSION - 1}, "a pod of an earlier admission of that name"),
        ({"phase": "Failed"}, "already done: its room is free"),
    ],
)
def test_a_pod_made_otherwise_than_placed_is_looked_up_as_any_new_pod(
    change: dict[str, Any], why: str
) -> None:
    state, on, looked = placed()

    assert state.put(objects([made(node_name=on, **change)])[0]) is True, why

    assert len(looked) == (0 if change.get("phase") == "Failed" else 1), why


def test_a_pod_made_on_another_node_is_looked_up_as_any_new_pod() -> None:
    state, on, looked = placed()
    other = "b" if on == "a" else "a"

    assert state.put(objects([made(node_name=other)])[0]) is True

    assert len(looked) == 1
    assert state.infos[POD].node == other  # where it is, not where it was placed


def test_a_permits_id_is_the_one_it_always_was() -> None:
    """Ids are fixed forever (a pass repeated across an upgrade is deduplicated by them): the
    permit of one admission, decided the same way, has the id main c57b97f9 gave it."""
    state = GangPermitState(cluster="local", creates_on_nodes=lambda owner_kind: True)
    state.restored()
    for obj in objects(node("a") + node("b")):
        state.put(obj)
    submitted, admitted = kueue_workload("train", 1)
    submitted.sequence, admitted.sequence = ADMISSION - 1, ADMISSION
    submitted.event_id, admitted.event_id = "submitted-1", "admitted-1"
    state.apply_event(submitted)
    state.apply_event(admitted)

    (permit,) = decide(state, now_s=10.0)

    assert permit.event_id == "5c32961a-9091-59b9-84af-b4e201a97a6a"


def restarted(
    permit: events_pb2.Envelope, *, bound: bool, made_on: str | None, binder_acked: int = 0
) -> GangPermitState:
    """A gang-permit restarted after `permit`: it replays the workload's events and its own
    permit (and the binder's `bound` with `bound`), reads the binder's ack floor
    `binder_acked`, then lists the cluster (the pod as the binder made it on `made_on`, or
    none yet)."""
    state = GangPermitState(cluster="local", creates_on_nodes=lambda owner_kind: True)
    submitted, admitted = kueue_workload("train", 1)
    submitted.sequence, admitted.sequence = ADMISSION - 1, ADMISSION
    replayed = [submitted, admitted, permit]
    if bound:
        answer = events_pb2.PodsBound(bindings=permit.gang_permitted.bindings)
        replayed.append(event("bound", answer, workload=str(TRAIN), cause=permit))
    for env in replayed:
        state.apply_event(env)
    state.restored(binder_acked=binder_acked)
    made_pod = [] if made_on is None else [made(node_name=made_on)]
    for obj in objects(node("a") + node("b") + made_pod):
        state.put(obj)
    return state


def permitted() -> events_pb2.Envelope:
    """The permit to create a placed state decided for its one-pod gang."""
    state = GangPermitState(cluster="local", creates_on_nodes=lambda owner_kind: True)
    state.restored()
    for obj in objects(node("a") + node("b")):
        state.put(obj)
    submitted, admitted = kueue_workload("train", 1)
    submitted.sequence, admitted.sequence = ADMISSION - 1, ADMISSION
    state.apply_event(submitted)
    state.apply_event(admitted)
    (permit,) = decide(state, now_s=10.0)
    permit.sequence = ADMISSION + 1  # as stored
    return permit


def test_a_restart_after_a_permit_the_binder_answered_with_no_bound_holds_nothing_more() -> None:
    """A binder with `--bound-events binds` stores no `bound` for a permit to create: the pod
    it made on its node answers the permit, and a restarted gang-permit holds the same room as
    one that also replayed a `bound` (docs/events.md, "`bound` only for binds")."""
    permit = permitted()
    (binding,) = permit.gang_permitted.bindings

    without = restarted(permit, bound=False, made_on=binding.node)
    told = restarted(permit, bound=True, made_on=binding.node)

    assert TRAIN not in without.permits  # answered by the pod seen on its node
    assert without.assumed == {}
    assert without.scheduler.node_of(POD) == binding.node
    for name in ("a", "b"):
        assert without.scheduler.free(NodeName(name)) == told.scheduler.free(NodeName(name))
    assert decide(without, now_s=20.0) == []  # nothing placed or permitted again


def test_a_restart_before_the_binder_made_the_pod_holds_it_on_its_node_until_made() -> None:
    """Restarted between the permit and the creation: the pod not made yet is held where it
    was placed (not placed again); made there, the permit is answered with no `bound`."""
    permit = permitted()
    (binding,) = permit.gang_permitted.bindings
    state = restarted(permit, bound=False, made_on=None)

    assert TRAIN in state.permits
    assert state.scheduler.node_of(POD) == binding.node
    assert decide(state, now_s=20.0) == []  # held, not permitted a second time

    state.put(objects([made(node_name=binding.node)])[0])

    assert TRAIN not in state.permits
    assert state.assumed == {}
