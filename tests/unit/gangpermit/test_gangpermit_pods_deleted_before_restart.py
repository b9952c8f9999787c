"""A whole permit answered by pods made on their nodes (the binder at `--bound-events binds`,
as every launcher starts it), whose pods were all deleted outside muster before gang-permit
restarted. Once the binder's ack floor says it handled the permit, the replayed permit holds
nothing: its pods not listed are gone. Read below it (or not read at all: an installation whose
gang-permit may not look at the binder's consumer yet), the permit holds its nodes as long as
the workload's admission holds its quota, and no longer: its end (the workload deleted, or
stopped: its eviction completed) frees the room, and nothing is placed or made again
(docs/events.md, "Launchers store `bound` only for binds")."""

from __future__ import annotations

import pytest
from cluster_docs import event
from test_gangpermit_made_pods import POD, TRAIN, permitted, restarted

from muster.contracts.v1 import events_pb2
from muster.core.placement.model import NodeName
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide


def ended(state: GangPermitState, how: str) -> bool:
    """The workload's end applied; whether a pass is due (the service wakes one)."""
    if how == "deleted":
        env = event("deleted", events_pb2.WorkloadDeleted(), workload=str(TRAIN))
    else:  # `muster stop workload`: admission evicts it, the binder stops its pods (none)
        done = events_pb2.EvictionCompleted(eviction_sequence=100)
        env = event("eviction_completed", done, workload=str(TRAIN))
    return state.apply_event(env)


@pytest.mark.parametrize("how", ["deleted", "eviction_completed"])
def test_a_replayed_permit_the_binder_has_not_acked_holds_until_its_workload_ends(
    how: str,
) -> None:
    permit = permitted()
    (binding,) = permit.gang_permitted.bindings
    acked = permit.sequence - 1  # the binder's ack floor: below the permit, or unread (0)
    state = restarted(permit, bound=False, made_on=None, binder_acked=acked)
    held = state.scheduler.free(NodeName(binding.node))
    assert TRAIN in state.permits  # no `bound` replayed: as if the binder had yet to make it
    assert decide(state, now_s=20.0) == []  # placed nowhere else, permitted once

    assert ended(state, how)  # a pass places the gangs waiting for the room

    assert TRAIN not in state.permits
    assert state.assumed == {}
    assert state.scheduler.node_of(POD) is None
    free = state.scheduler.free(NodeName(binding.node))
    assert free["cpu"] == held["cpu"] + 1000  # its one cpu is free again
    assert decide(state, now_s=30.0) == []  # nothing placed or made again


@pytest.mark.parametrize("past", [0, 5], ids=["acked-at-the-permit", "acked-past-it"])
def test_a_replayed_permit_the_binder_acked_holds_nothing_for_pods_deleted(past: int) -> None:
    permit = permitted()
    (binding,) = permit.gang_permitted.bindings
    empty = restarted(permit, bound=False, made_on=None, binder_acked=0)  # for the room
    free = empty.scheduler.free(NodeName(binding.node))

    state = restarted(permit, bound=False, made_on=None, binder_acked=permit.sequence + past)

    assert TRAIN not in state.permits
    assert state.assumed == {}
    assert not state.unmade.of(TRAIN)  # made, and deleted since
    assert state.scheduler.node_of(POD) is None
    assert state.scheduler.free(NodeName(binding.node))["cpu"] == free["cpu"] + 1000
    assert decide(state, now_s=20.0) == []  # nothing placed or made again


def test_a_replayed_permit_the_binder_acked_takes_its_pods_made_on_their_nodes() -> None:
    """Its pods listed where the binder made them hold their room as bound pods."""
    permit = permitted()
    (binding,) = permit.gang_permitted.bindings

    state = restarted(permit, bound=False, made_on=binding.node, binder_acked=permit.sequence)

    assert TRAIN not in state.permits
    assert state.scheduler.node_of(POD) == binding.node
    assert state.pods[POD].meta.uid == "uid-made"
    assert decide(state, now_s=20.0) == []
