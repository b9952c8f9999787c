"""A watcher started beside a gateway that submits as another cluster id says so at start,
naming both (the twin of the gateway's check, test_hostile_gateway_cluster.py): before,
nothing was said, and every workload submitted through that gateway waited for ever. A real
nats-server and watcher; the gateway's Submits and the other watchers' configuration go in as
their events."""

from __future__ import annotations

import logging

import pytest
from admission_world import config_applied, publish
from bus_helpers import EventLog
from gateway_helpers import running_gateway
from placement_stack import CLUSTER, Stack
from test_gateway_submit_race import outcome, submit, workload
from test_hostile_config_owner import namespace
from workload_manifest import workload_manifest

from muster.bus import Bus, new_event
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore
from muster.contracts.v1 import events_pb2

pytestmark = pytest.mark.timeout(60)

WARNING = (
    "this watcher runs with --cluster local, but workloads are submitted to prod, whose "
    "configuration (Namespaces, queues) no watcher publishes: admission never gets their "
    "Namespaces and no watcher runs them, so they wait for ever; give the gateway this "
    "watcher's --cluster (MUSTER_CLUSTER), or run a watcher as prod"
)


def submitted_to(cluster: str) -> events_pb2.Envelope:
    """A Submit's event through a gateway running as `cluster`."""
    payload = events_pb2.WorkloadSubmitted(
        queue_name="main", manifest_json=workload_manifest("ns/a", queue="main")
    )
    return new_event("submitted", payload, cluster=cluster, workload="ns/a", source="gateway")


@pytest.mark.parametrize(
    ("watched", "warned"),
    [((), [WARNING]), (("prod",), [])],
    ids=["prod-unwatched", "prod-watched"],
)
async def test_a_watcher_beside_a_gateway_submitting_as_another_cluster_warns_at_start(
    bus: Bus,
    events: EventLog,
    caplog: pytest.LogCaptureFixture,
    watched: tuple[str, ...],
    warned: list[str],
) -> None:
    await publish(
        bus,
        submitted_to("prod"),
        submitted_to(CLUSTER),  # its own: configured once it starts
        submitted_to("east"),  # a MultiKueue worker, configured by its watcher
        config_applied(namespace("team-a"), cluster="east"),
        *(config_applied(namespace("team-a"), cluster=c) for c in watched),
    )
    caplog.set_level(logging.WARNING, logger="muster.watcher")
    stack = Stack(
        bus=bus, backend=SimBackend(await SimStore.open(bus.kv, cluster=CLUSTER)), events=events
    )
    await stack.start_watcher()  # ready once checked
    await stack.stop_all()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == warned


async def test_a_gateway_claiming_names_by_its_submitted_alone_is_caught_too(
    bus: Bus, events: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    # A gateway left at `prod` stores its Submits on their names' subjects only.
    async with running_gateway(bus, cluster="prod", name_claims="submitted") as gateway:
        assert outcome(await submit(gateway, workload("a"), "a")) == "submitted"
    assert await bus.stored_subjects("muster.v1.prod.workload.submitted.*") == []  # named only
    caplog.set_level(logging.WARNING, logger="muster.watcher")
    stack = Stack(
        bus=bus, backend=SimBackend(await SimStore.open(bus.kv, cluster=CLUSTER)), events=events
    )
    await stack.start_watcher()
    await stack.stop_all()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [WARNING]
