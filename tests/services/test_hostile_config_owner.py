"""A worker cluster must not rewrite or delete the manager's queue configuration.

Each cluster's watcher may publish `config.applied` and `config.deleted` on its own subjects
(muster.v1.<cluster>.config.*: bus/permissions.py; it must, for its Namespaces), so the server
cannot tell a worker's ClusterQueue from the manager's. Admission takes an object's
configuration only from the cluster that owns it (`muster.core.config_owners`) and dead-letters
the rest, naming the object and both clusters. Namespaces are each cluster's own: a worker's
Namespace of the manager's name (MultiKueue workers have one) is kept apart from the
manager's, so the labels a namespaceSelector reads are the manager's, after a rebuild too. A
real nats-server, admission as in production; the events are put on the worker's subjects as
its watcher's user may put them.
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


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


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
    basic = [
        config_applied(flavor()),
        config_applied(cluster_queue()),
        config_applied(local_queue()),
    ]

    await admitted_across_a_rebuild(
        bus,
        bus_config,
        events,
        [*basic, *forged],
        after=workload("after", cpu="3"),
        snapshot_s=snapshot_s,
    )


async def admitted_across_a_rebuild(
    bus: Bus,
    bus_config: BusConfig,
    events: EventLog,
    history: list[pb.Envelope],
    *,
    after: dict[str, Any],
    snapshot_s: float,
) -> None:
    """A replica takes `history` and admits a workload "before" in `after`'s namespace; a new
    replica (from the stream, or from the first one's snapshot when `snapshot_s`) admits
    `after`."""
    namespace = after["metadata"]["namespace"]
    first = await start_admission(bus_config, snapshot_s=snapshot_s)
    async with running(first):
        await first.wait_serving()
        await publish(bus, *history, submitted(workload("before", namespace=namespace)))
        await events.wait_for("admitted", workload=f"{namespace}/before")
        if snapshot_s:
            last = (await bus.js.stream_info("MUSTER_EVENTS")).state.last_seq
            await snapshot_written(bus, at_least=last)

    second = await start_admission(bus_config, snapshot_s=snapshot_s)
    async with running(second):
        await second.wait_serving()
        await publish(bus, submitted(after))
        await events.wait_for("admitted", workload=f"{namespace}/{after['metadata']['name']}")


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


def manager_config() -> list[pb.Envelope]:
    """The manager's: east declared a worker; ClusterQueue cq for namespaces labelled team=a;
    LocalQueue team-a/lq; its Namespace team-a, so labelled."""
    selecting = cluster_queue()
    selecting["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    return [
        config_applied(flavor()),
        config_applied(worker("east")),
        config_applied(selecting),
        config_applied(local_queue(namespace="team-a")),
        config_applied(namespace("team-a", team="a")),
    ]


def worker_namespace(*, deletes: bool) -> list[pb.Envelope]:
    """east's own team-a, labelled so that the manager's cq would refuse it; maybe deleted."""
    applied = config_applied(namespace("team-a", team="b"), cluster="east")
    if not deletes:
        return [applied]
    return [applied, config_deleted("Namespace", "team-a", cluster="east")]


@pytest.mark.parametrize("deletes", [False, True], ids=["applies", "deletes"])
async def test_a_workers_namespace_of_the_managers_name_leaves_the_managers_labels(
    bus: Bus, bus_config: BusConfig, events: EventLog, deletes: bool
) -> None:
    # Taken as the manager's (as before), team-a is labelled team=b, or gone: the workload
    # waits, Pending: "workload namespace doesn't match ClusterQueue selector".
    admission = await start_admission(bus_config)
    async with running(admission):
        await admission.wait_serving()
        await publish(bus, *manager_config(), *worker_namespace(deletes=deletes))
        await publish(bus, submitted(workload("after", namespace="team-a")))
        await events.wait_for("admitted", workload="team-a/after")

    assert await dead_letter_reasons(bus) == {}  # a worker may have its own Namespaces
    assert events.matching("pending", workload="team-a/after") == []


@pytest.mark.parametrize("snapshot_s", [0.0, 0.2], ids=["from-stream", "from-snapshot"])
async def test_a_rebuilt_replica_keeps_each_clusters_namespace(
    bus: Bus, bus_config: BusConfig, events: EventLog, snapshot_s: float
) -> None:
    history = [*manager_config(), *worker_namespace(deletes=False)]
    after = workload("after", namespace="team-a")

    await admitted_across_a_rebuild(
        bus, bus_config, events, history, after=after, snapshot_s=snapshot_s
    )

    assert events.matching("pending", workload="team-a/after") == []
