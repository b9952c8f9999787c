"""A worker cluster must not rewrite or delete the manager's queue configuration.

Each cluster's watcher may publish `config.applied` and `config.deleted` on its own subjects
(muster.v1.<cluster>.config.*: bus/permissions.py; it must, for its Namespaces), so the server
cannot tell a worker's ClusterQueue from the manager's. Admission takes an object's
configuration only from the cluster that owns it (`muster.core.config_owners`) and dead-letters
the rest, naming the object and both clusters. A real nats-server, admission as in production;
the events are put on the worker's subjects as its watcher's user may put them.
"""

from __future__ import annotations

from typing import Any

import pytest
from admission_world import (
    KUEUE,
    basic_config,
    cluster_queue,
    config_applied,
    config_deleted,
    eventually,
    flavor,
    local_queue,
    publish,
    running,
    snapshot_written,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog
from gateway_helpers import running_gateway
from test_hostile_events import admitted_after, dead_letter_reasons

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import events_pb2 as pb
from muster.contracts.v1 import services_pb2

pytestmark = pytest.mark.timeout(60)


def worker(name: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "MultiKueueCluster", "metadata": {"name": name}}


async def test_a_worker_deleting_the_managers_queues_is_dead_lettered(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    # Believed (as before), cq is gone and the next workload is Pending: Misconfigured.
    forged = [
        config_deleted("ClusterQueue", "cq", cluster="east"),
        config_deleted("ResourceFlavor", "default", cluster="east"),
        config_deleted("LocalQueue", "ns/lq", cluster="east"),
    ]

    await admitted_after(bus, bus_config, events, *forged)

    reasons = await dead_letter_reasons(bus)
    assert [reasons.get(f.event_id) for f in forged] == [
        "ClusterQueue cq: deleting it from cluster east is refused: "
        "cluster local applied it first and owns it",
        "ResourceFlavor default: deleting it from cluster east is refused: "
        "cluster local applied it first and owns it",
        "LocalQueue ns/lq: deleting it from cluster east is refused: "
        "cluster local applied it first and owns it",
    ]


async def test_a_worker_with_queues_of_the_managers_names_changes_none(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    # A MultiKueue worker runs its own Kueue with ClusterQueues of the manager's names: here
    # one of no quota. Taken, the 1-cpu workload would wait for ever.
    forged = config_applied(cluster_queue(cpu="0"), cluster="east")

    await admitted_after(bus, bus_config, events, forged)

    reasons = await dead_letter_reasons(bus)
    assert reasons[forged.event_id] == (
        "ClusterQueue cq: applying it from cluster east is refused: "
        "cluster local applied it first and owns it"
    )


async def test_a_declared_worker_configures_nothing_and_loses_what_it_applied_before(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    # east's watcher came up before the manager's and published its own cq (no quota); then
    # the manager declared east a worker and applied its cq: the manager's counts.
    early = config_applied(cluster_queue(cpu="0"), cluster="east")
    manager = [
        config_applied(flavor()),
        config_applied(worker("east")),
        config_applied(cluster_queue(cpu="4")),
        config_applied(local_queue()),
    ]
    late = config_applied(cluster_queue("east-only"), cluster="east")
    admission = await start_admission(bus_config)
    async with running(admission):
        await admission.wait_serving()
        await publish(bus, early, *manager, late, submitted(workload("after")))
        await events.wait_for("admitted", workload="ns/after")

    reasons = await dead_letter_reasons(bus)
    assert set(reasons) == {late.event_id}
    assert reasons[late.event_id] == (
        "ClusterQueue east-only: applying it from cluster east is refused: east is a "
        "MultiKueue worker (a MultiKueueCluster names it); a worker's own queues do not "
        "configure admission"
    )


@pytest.mark.parametrize("snapshot_s", [0.0, 0.2], ids=["from-stream", "from-snapshot"])
async def test_a_rebuilt_replica_keeps_the_owners_configuration(
    bus: Bus, bus_config: BusConfig, events: EventLog, snapshot_s: float
) -> None:
    forged = [
        config_applied(cluster_queue(cpu="0"), cluster="east"),
        config_deleted("LocalQueue", "ns/lq", cluster="east"),
    ]
    first = await start_admission(bus_config, snapshot_s=snapshot_s)
    async with running(first):
        await first.wait_serving()
        await basic_config(bus)
        await publish(bus, *forged, submitted(workload("before")))
        await events.wait_for("admitted", workload="ns/before")
        if snapshot_s:
            last = (await bus.js.stream_info("MUSTER_EVENTS")).state.last_seq
            await snapshot_written(bus, at_least=last)

    second = await start_admission(bus_config, snapshot_s=snapshot_s)
    async with running(second):
        await second.wait_serving()
        await publish(bus, submitted(workload("after", cpu="3")))
        await events.wait_for("admitted", workload="ns/after")


async def test_stop_cluster_queue_stops_the_owners_queue_not_a_workers_copy(
    bus: Bus, events: EventLog
) -> None:
    await basic_config(bus)
    copy = config_applied(cluster_queue(cpu="0"), cluster="east")
    await publish(bus, copy)
    ref = services_pb2.ObjectRef(kind="ClusterQueue", name="cq")
    async with running_gateway(bus) as gw:
        await gw.gateway.Stop(services_pb2.StopRequest(object=ref), timeout=10)

    def stopped() -> list[pb.Envelope]:
        return [
            e
            for e in events.matching("config_applied")
            if e.config_applied.name == "cq" and "stopPolicy" in e.config_applied.manifest_json
        ]

    async def published() -> bool:
        return bool(stopped())

    await eventually(published)
    (stop,) = stopped()
    assert stop.cluster == "local"
    assert '"nominalQuota":"4"' in stop.config_applied.manifest_json.replace(" ", "")
