"""A whole permit answered by pods made on their nodes (the binder at `--bound-events binds`,
as every launcher starts it), whose pods were all deleted outside muster before gang-permit
restarted: the replayed permit holds its nodes as long as the workload's admission holds its
quota, and no longer. Its end (the workload deleted, or stopped: its eviction completed) frees
the room, and nothing is placed or made again (docs/events.md, "Launchers store `bound` only
for binds")."""

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
def test_a_replayed_permit_whose_pods_were_deleted_holds_until_its_workload_ends(
    how: str,
) -> None:
    permit = permitted()
    (binding,) = permit.gang_permitted.bindings
    state = restarted(permit, bound=False, made_on=None)  # made, then deleted: none listed
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
