"""MultiKueue through the services: admission dispatches to worker clusters, each running its
own watcher, gang-permit, binder and kubelet, and the workload's status flows back over NATS.

A real nats-server; two simulated clusters, east and west; admission and preemption as in
production; the configuration and the workloads go in as YAML through the gateway, into the
manager cluster "local", which runs no nodes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from admission_world import Running, start_admission, start_preemption
from bus_helpers import EventLog
from gateway_helpers import RunningGateway, running_gateway
from multicluster_stack import (
    SimCluster,
    about,
    job,
    multikueue_config,
    node,
    reported,
    sim_clusters,
    wait_for,
)

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(90)

# How long a worker may be silent before admission calls it lost (heartbeats: every 0.2 s).
# Where no cluster goes away, long: an event loop stalled for a second by load (~40 on 2
# cores) must not lose a cluster that is there. Where east is killed, the test waits that
# long for its loss, so shorter, still 15 heartbeats.
NEVER_LOST_S = 60.0
LOST_AFTER_S = 3.0

CONFIG = multikueue_config("east", "west", cpu=6)


class World:
    def __init__(
        self, clusters: dict[str, SimCluster], gateway: RunningGateway, events: EventLog
    ) -> None:
        self.clusters = clusters
        self.gateway = gateway
        self.events = events

    async def submit(self, manifest: str) -> None:
        await self.gateway.gateway.Submit(services_pb2.SubmitRequest(manifest=manifest))


@pytest.fixture
def lost_after_s() -> float:
    """Admission's cluster-lost timeout (a test that needs a loss parametrizes it)."""
    return NEVER_LOST_S


@pytest.fixture
async def world(
    bus: Bus, bus_config: BusConfig, events: EventLog, lost_after_s: float
) -> AsyncIterator[World]:
    services: list[Running] = []
    async with sim_clusters(bus, "east", "west") as clusters, running_gateway(bus) as gateway:
        try:
            admission = await start_admission(bus_config, cluster_lost_s=lost_after_s)
            services.append(admission)
            services.append(await start_preemption(bus_config, resend_s=0.5))
            for svc in services:
                await svc.wait_serving()
            await clusters["east"].backend.apply(node("east-1", cpu="2"))
            await clusters["west"].backend.apply(node("west-1", cpu="4"))
            await reported(bus, "east", "east-1")
            await reported(bus, "west", "west-1")
            world = World(clusters, gateway, events)
            await world.submit(CONFIG)
            yield world
        finally:
            for svc in services:
                await svc.stop()


def clusters_of(events: EventLog, field: str, workload: str) -> list[str]:
    return [e.cluster for e in about(events, field, workload)]


async def test_dispatches_to_the_first_cluster_with_room_and_status_flows_back(
    world: World,
) -> None:
    events = world.events
    await world.submit(job("small", pods=2, run_seconds=20))  # east: 2 cpu
    admitted = await wait_for(events, "admitted", "ml/small")
    assert admitted.cluster == "east"
    # east is full: west. It runs longer than small, so that small is surely the one to finish
    # first and make room (the same run time raced east's heartbeat against west's).
    await world.submit(job("big", pods=3, run_seconds=60))
    assert (await wait_for(events, "admitted", "ml/big")).cluster == "west"

    # Each runs where it was sent, and what its cluster's watcher says reaches admission.
    await wait_for(events, "running", "ml/small", cluster="east")
    await wait_for(events, "running", "ml/big", cluster="west")
    assert {p.node_name for p in await world.clusters["east"].pods_of("ml/small")} == {"east-1"}
    assert {p.node_name for p in await world.clusters["west"].pods_of("ml/big")} == {"west-1"}
    assert await world.clusters["west"].pods_of("ml/small") == []

    # 5 of the 6 cpu of quota are reserved: a third waits for quota until small finishes on
    # east; then admission, told by east, admits it, and it goes to east again.
    await world.submit(job("third", pods=2, run_seconds=1))
    pending = await wait_for(events, "pending", "ml/third")
    assert pending.pending.reason == "WaitingForQuota"
    await wait_for(events, "finished", "ml/small", cluster="east")
    assert (await wait_for(events, "admitted", "ml/third")).cluster == "east"
    await wait_for(events, "finished", "ml/third", cluster="east")
    await wait_for(events, "finished", "ml/big", cluster="west")

    # The check said where each went, on the workload's events.
    checks = about(events, "admission_check", "ml/big")
    assert [(c.admission_check.check, c.admission_check.state) for c in checks][-1] == (
        "dispatch",
        "Ready",
    )
    assert checks[-1].admission_check.message.startswith("dispatched to cluster west")
    for key in ("ml/small", "ml/big", "ml/third"):
        assert len(about(events, "admitted", key)) == 1


@pytest.mark.parametrize("lost_after_s", [LOST_AFTER_S])
async def test_a_lost_clusters_workload_finishes_elsewhere_exactly_once(world: World) -> None:
    events = world.events
    east, west = world.clusters["east"], world.clusters["west"]
    await world.submit(job("long", pods=2, run_seconds=60))  # 3 s at 20x
    assert (await wait_for(events, "admitted", "ml/long")).cluster == "east"
    await wait_for(events, "running", "ml/long", cluster="east")

    await east.kill()  # east disappears: no heartbeat, no watcher, no binder, no kubelet

    evicted = await wait_for(events, "evicted", "ml/long")
    assert (evicted.cluster, evicted.evicted.reason) == ("east", "ClusterLost")
    completed = await wait_for(events, "eviction_completed", "ml/long", cluster="east")
    assert completed.source.startswith("admission/")  # east cannot say so: admission does
    readmitted = await wait_for(events, "admitted", "ml/long", cluster="west")
    assert readmitted.sequence > completed.sequence
    finished = await wait_for(events, "finished", "ml/long", cluster="west")
    assert finished.finished.succeeded
    assert clusters_of(events, "admitted", "ml/long") == ["east", "west"]
    assert clusters_of(events, "finished", "ml/long") == ["west"]

    # east comes back: its binder carries out the eviction that waited in its work queue (the
    # pods it still had are deleted), and nothing about ml/long starts there again. What
    # east's watcher says about them now does not count: admission decides nothing more.
    await east.start()
    done = await wait_for(events, "eviction_completed", "ml/long", source="binder/east")
    assert done.cause  # the cmd.evict sent while east was away
    assert await east.pods_of("ml/long") == []
    await world.submit(job("after", pods=1, run_seconds=1))
    await wait_for(events, "finished", "ml/after")
    assert clusters_of(events, "admitted", "ml/long") == ["east", "west"]
    later = events.seen[events.seen.index(finished) + 1 :]
    assert [
        e.type for e in later if e.workload == "ml/long" and e.source.startswith("admission/")
    ] == []
    assert {p.phase for p in await west.pods_of("ml/long")} == {"Succeeded"}
