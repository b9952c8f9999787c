"""A worker cluster that lies, as its compromised or buggy services would: in its heartbeat
(MUSTER_CLUSTERS), or in events on its own subjects. The manager must not take it for another
cluster, nor be kept from serving the others.

NATS lets each cluster's services write their own keys and subjects only
(`bus/permissions.py`), but the body is whatever that writer put. A real nats-server,
admission and the gateway as in production; the configuration and the workloads go in as YAML
through the gateway; heartbeats and events are put as a worker's services put them, the lies
as hostile ones would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import msgspec
import pytest
from admission_world import drained, eventually, start_admission
from bus_helpers import EventLog
from cluster_rooms import report, room
from gateway_helpers import running_gateway
from multicluster_stack import about, job, multikueue_config, wait_for, watchers
from test_hostile_events import dead_letter_reasons

from muster.admission.clusters import follow_clusters
from muster.admission.dispatch import Dispatcher
from muster.api.model import MultiKueueCluster, ObjectMeta
from muster.bus import Bus, BusConfig, new_event
from muster.bus.buckets import CLUSTERS_BUCKET
from muster.bus.envelope import encode
from muster.contracts.v1 import events_pb2, services_pb2, services_pb2_grpc
from muster.core.dispatch import ClusterCapacity

pytestmark = pytest.mark.timeout(60)

NEVER_LOST_S = 60.0  # no cluster here goes silent on purpose


async def test_a_heartbeat_naming_another_cluster_is_refused_and_the_others_work_on(
    bus: Bus, bus_config: BusConfig, events: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    # west, listed first, never reports (it is down); east reports its own room. north's
    # gang-permit, allowed to write key `north` only, puts there a heartbeat naming west,
    # with a node of room: believed, it keeps a down cluster alive and draws work to it.
    await report(bus, "east", [room(0, prefix="east")])
    lie = ClusterCapacity(cluster="west", nodes=(room(0, prefix="fake"),))
    registry = await bus.kv(CLUSTERS_BUCKET)
    await registry.put("north", msgspec.json.encode(lie))

    caplog.set_level(logging.WARNING)
    async with running_gateway(bus) as gateway:
        admission = await start_admission(bus_config, cluster_lost_s=NEVER_LOST_S)
        try:
            await admission.wait_serving()
            submit = gateway.gateway.Submit
            config = multikueue_config("west", "east", cpu=8)
            await submit(services_pb2.SubmitRequest(manifest=config))

            async def following() -> bool:
                return await watchers(bus) == 1

            await eventually(following)  # the stored heartbeats are read first
            await submit(services_pb2.SubmitRequest(manifest=job("train", pods=2)))

            admitted = await wait_for(events, "admitted", "ml/train")
            assert admitted.cluster == "east"

            async def ready_check() -> bool:
                return any(c.state == "Ready" for c in checks_of(events, "ml/train"))

            await eventually(ready_check)
            (ready,) = [c for c in checks_of(events, "ml/train") if c.state == "Ready"]
            assert ready.message.startswith("dispatched to cluster east")
            assert "not west: no heartbeat yet" in ready.message

            # The manager says which heartbeat it refused, naming its key and the field.
            refused = [r.getMessage() for r in caplog.records if "north" in r.getMessage()]
            assert any("$.cluster: 'west' is not 'north'" in m for m in refused), refused

            # The gateway shows north without room, and no west at all.
            visibility = services_pb2_grpc.VisibilityStub(gateway.channel)
            shown = await visibility.Clusters(services_pb2.ClustersRequest())
            rooms = {c.name: c.node_count for c in shown.clusters}
            assert rooms == {"east": 1, "north": 0}
        finally:
            await admission.stop()


def checks_of(events: EventLog, workload: str) -> list[events_pb2.AdmissionCheckUpdated]:
    return [e.admission_check for e in about(events, "admission_check", workload)]


async def test_a_worker_speaking_for_another_cluster_on_its_own_subject_is_dead_lettered(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    await report(bus, "west", [room(0, prefix="west")])
    async with running_gateway(bus) as gateway:
        admission = await start_admission(bus_config, cluster_lost_s=NEVER_LOST_S)
        try:
            await admission.wait_serving()
            submit = gateway.gateway.Submit
            await submit(services_pb2.SubmitRequest(manifest=multikueue_config("west", cpu=4)))
            await submit(services_pb2.SubmitRequest(manifest=job("first", pods=4)))
            assert (await wait_for(events, "admitted", "ml/first")).cluster == "west"
            await submit(services_pb2.SubmitRequest(manifest=job("second", pods=4)))
            await wait_for(events, "pending", "ml/second")  # first holds the quota

            # east's watcher may publish on muster.v1.east.* only: there, it says first (which
            # runs on west) finished, as west's watcher would. Believed, first's quota is free.
            payload = events_pb2.WorkloadFinished(succeeded=True)
            forged = new_event(
                "finished", payload, cluster="west", workload="ml/first", source="watcher/west"
            )
            await bus.js.publish("muster.v1.east.workload.finished", encode(forged))

            async def dead_lettered() -> bool:
                return forged.event_id in await dead_letter_reasons(bus)

            await eventually(dead_lettered, timeout_s=20)
            await drained(bus, "admission-0")
            reason = (await dead_letter_reasons(bus))[forged.event_id]
            assert reason == (
                f"envelope {forged.event_id} (workload.finished of cluster 'west') was published "
                "on 'muster.v1.east.workload.finished', not on its own subject "
                "'muster.v1.west.workload.finished'"
            )
            assert about(events, "admitted", "ml/second") == []
            assert about(events, "finished", "ml/first") == []  # a replay, as this log, skips it
        finally:
            await admission.stop()


class Waiting(Dispatcher):
    """A replica with a workload waiting for room: every heartbeat asks for a round."""

    def wants_round(self) -> bool:
        return True


async def test_a_worker_reporting_in_a_burst_gets_one_round_and_never_stalls_the_registry(
    bus: Bus,
) -> None:
    # A round takes as long as the test says; east's gang-permit reports 100 times meanwhile,
    # each time something else. They were heard one by one, each after a round of its own.
    dispatcher = Waiting(lost_after_s=NEVER_LOST_S)
    dispatcher.declared["east"] = MultiKueueCluster(meta=ObjectMeta(name="east"))
    rounds: list[Sequence[events_pb2.Envelope]] = []  # what each round was given
    running = asyncio.Event()  # set: a round may end

    async def round_(envs: Sequence[events_pb2.Envelope]) -> None:
        rounds.append(envs)
        await running.wait()

    follow = follow_clusters(bus, dispatcher, round_, clock=time.monotonic, wanted_s=0.01)
    follower = asyncio.create_task(follow)
    try:
        await eventually(lambda: _true(bool(rounds)))  # the round once the registry is read
        for i in range(100):
            await report(bus, "east", [room(i, prefix="east")])

        async def all_heard() -> bool:
            heard = dispatcher.capacity.get("east")
            return heard is not None and heard.nodes[0].name == "east-00099"

        await eventually(all_heard, timeout_s=20)  # while the first round still runs
        assert len(rounds) == 1
        running.set()
        await eventually(lambda: _true(len(rounds) == 2))  # one for the hundred
        await report(bus, "east", [room(100, prefix="east")])
        await eventually(lambda: _true(len(rounds) == 3))
        assert rounds == [[], [], []]  # rounds asked by heartbeats carry no event
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)


async def _true(value: bool) -> bool:
    return value
