"""A worker cluster's Namespace of the manager's name must not change the manager's.

Namespaces are each cluster's own (`muster.core.config_owners`): a MultiKueue worker has its
own `team-a`, labelled as the worker's admins please, and its watcher publishes it (and its
deletion) on the worker's subjects. Admission keeps each cluster's apart, so the labels a
ClusterQueue's namespaceSelector reads for the manager's workloads are the manager's, and a
rebuilt replica (from the stream or from a snapshot) keeps both clusters' Namespaces. A real
nats-server, admission as in production.
"""

from __future__ import annotations

from typing import Any

import pytest
from admission_world import (
    KUEUE,
    cluster_queue,
    config_applied,
    config_deleted,
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
from test_hostile_events import dead_letter_reasons

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def manager_config() -> list[pb.Envelope]:
    """The manager's: east declared a worker; ClusterQueue cq for namespaces labelled team=a;
    LocalQueue team-a/lq; its Namespace team-a, so labelled."""
    selecting = cluster_queue()
    selecting["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    east = {"apiVersion": KUEUE, "kind": "MultiKueueCluster", "metadata": {"name": "east"}}
    return [
        config_applied(flavor()),
        config_applied(east),
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
    first = await start_admission(bus_config, snapshot_s=snapshot_s)
    async with running(first):
        await first.wait_serving()
        await publish(bus, *manager_config(), *worker_namespace(deletes=False))
        await publish(bus, submitted(workload("before", namespace="team-a")))
        await events.wait_for("admitted", workload="team-a/before")
        if snapshot_s:
            last = (await bus.js.stream_info("MUSTER_EVENTS")).state.last_seq
            await snapshot_written(bus, at_least=last)

    second = await start_admission(bus_config, snapshot_s=snapshot_s)
    async with running(second):
        await second.wait_serving()
        await publish(bus, submitted(workload("after", namespace="team-a")))
        await events.wait_for("admitted", workload="team-a/after")

    assert events.matching("pending", workload="team-a/after") == []
