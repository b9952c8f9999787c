"""A StrictFIFO head that needs preemption and has no victim holds quota from the heads after
it (Kueue's reserveCapacityForUnreclaimablePreempt). The hold is derived from the records, not
stored: a replica rebuilt from the stream, a snapshot, or both decides as the live one did,
and releases it as the live one does once the head is deleted."""

from __future__ import annotations

from typing import Any

import pytest
from admission_stream import applied, cluster_queue, flavor, local_queue, reported, submitted
from admission_stream import workload as workload_manifest
from snapshot_world import LiveReplica, StoredStream, rebuilt_from

from muster.admission.snapshot import decode_snapshot, encode_snapshot
from muster.admission.state import AdmissionState
from muster.api.model import WorkloadKey
from muster.contracts.v1 import events_pb2 as pb

A1, B2 = WorkloadKey("ns/a1"), WorkloadKey("ns/b2")
NO_LONGER_FITS = "Workload no longer fits after processing another workload"


def _team(name: str, cpu: str, **spec: Any) -> dict[str, Any]:
    manifest = cluster_queue(name, cpu=cpu, cohort="shared")
    manifest["spec"].update(spec)
    return manifest


class World:
    """One stored stream and the live replica consuming it, on a clock the test moves."""

    def __init__(self) -> None:
        self.clock = [0.0]
        self.stream = StoredStream()
        self.replica = LiveReplica(self.stream, clock=self.clock)

    async def at(self, at_s: float, env: pb.Envelope) -> None:
        self.clock[0] = at_s
        self.stream.put(env)
        await self.replica.catch_up()


async def held_back() -> World:
    """Cohort "shared": team-a (4 cpu, StrictFIFO, reclaims from lower priorities only) and
    team-b (2 cpu). b1 (priority 5, 4 cpu) borrows 2 of team-a's; at 5 s a1 (4 cpu) has no
    victim and holds them; at 6 s b2 (1 cpu) no longer fits."""
    world = World()
    team_a = _team(
        "team-a",
        "4",
        queueingStrategy="StrictFIFO",
        preemption={"reclaimWithinCohort": "LowerPriority"},
    )
    manifests = (
        flavor(),
        team_a,
        _team("team-b", "2"),
        local_queue("lq-a", cq="team-a"),
        local_queue("lq-b", cq="team-b"),
    )
    for manifest in manifests:
        world.stream.put(applied(manifest))
    b1 = workload_manifest("b1", cpu="4", queue="lq-b", priority=5)
    await world.at(0.0, submitted(b1, at_s=0.0))
    await world.at(5.0, submitted(workload_manifest("a1", cpu="4", queue="lq-a"), at_s=5.0))
    await world.at(6.0, submitted(workload_manifest("b2", cpu="1", queue="lq-b"), at_s=6.0))
    return world


def _held(state: AdmissionState) -> tuple[str | None, str | None, str]:
    engine = state.engine
    return engine.phase(A1), engine.phase(B2), engine.records[B2].pending_message


async def test_the_live_replica_holds_back_b2() -> None:
    world = await held_back()
    assert _held(world.replica.state) == ("Pending", "Pending", NO_LONGER_FITS)


@pytest.mark.parametrize("source", ["stream", "snapshot", "service"])
async def test_a_rebuilt_replica_holds_back_b2_too(source: str) -> None:
    world = await held_back()
    snapshot = decode_snapshot(encode_snapshot(world.replica.snapshot()))
    state = await rebuilt_from(source, world.stream, snapshot)
    assert state.take_ownership(now_s=7.0) == []  # nothing decided differently
    assert _held(state) == ("Pending", "Pending", NO_LONGER_FITS)


@pytest.mark.parametrize("source", ["stream", "service"])
async def test_the_deleted_head_releases_it_live_and_rebuilt_alike(source: str) -> None:
    """a1 deleted at 8 s: the live replica admits b2 at once; a replica rebuilt from the
    stream (after a snapshot from before the deletion, for "service") finds it so."""
    world = await held_back()
    snapshot = decode_snapshot(encode_snapshot(world.replica.snapshot()))
    await world.at(8.0, reported("deleted", A1, at_s=8.0))
    assert world.replica.state.engine.phase(B2) == "Admitted"
    state = await rebuilt_from(source, world.stream, snapshot)
    assert state.take_ownership(now_s=9.0) == []
    assert state.engine.phase(B2) == "Admitted"
