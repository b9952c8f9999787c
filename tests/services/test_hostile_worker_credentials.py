"""What a compromised worker watcher can actually send, under its own NATS credentials.

The config-owner attacks (test_hostile_config_owner, test_hostile_install_race) publish with the
test's unrestricted bus. Here every event goes in as muster's deployment lets it: a nats-server
with the users `muster.bus.permissions` generates, the manager's configuration and workload
published as `watcher-local`, the forged events as `watcher-east` (which may publish
configuration on east's subjects only: each cluster's watcher must, for its Namespaces), and
admission running as `admission`. The server takes what east may send and refuses the
manager's subjects; admission dead-letters each forged event, naming it and both clusters, and
admits the manager's workload.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from admission_world import (
    cluster_queue,
    config_applied,
    config_deleted,
    flavor,
    local_queue,
    msgspec_replace,
    publish,
    running,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog
from nats_process import NatsServer, configured_nats
from test_hostile_config_owner import worker
from test_hostile_events import dead_letter_reasons
from test_hostile_install_race import A_WORKER, NOT_MANAGER

from muster.bus import Bus, BusConfig, connect
from muster.bus.errors import BusError
from muster.bus.natsconf import authorization
from muster.bus.permissions import ADMIN, Deployment, inbox_prefix, users
from muster.bus.setup import setup_nats

DEPLOYMENT = Deployment(clusters=("local", "east"), admission_shards=1)
PASSWORDS = {u.name: secrets.token_urlsafe(16) for u in users(DEPLOYMENT)}

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def nats_process(tmp_path: Path) -> Iterator[NatsServer]:
    """The deployment's nats-server: every service its own user, as `muster nats-config`."""
    block = authorization(users(DEPLOYMENT), auth="password", passwords=PASSWORDS)
    with configured_nats(tmp_path, block=block) as server:
        yield server


def as_user(config: BusConfig, user: str) -> BusConfig:
    return msgspec_replace(
        config, user=user, password=PASSWORDS[user], inbox_prefix=inbox_prefix(user)
    )


@pytest.fixture
def bus_config(nats_server: str) -> BusConfig:
    """The admin's (it sets NATS up, and reads the events and dead letters)."""
    plain = BusConfig(url=nats_server, name="muster-test", connect_timeout_s=5.0)
    return as_user(plain, ADMIN)


@pytest.fixture
async def bus(bus_config: BusConfig) -> AsyncIterator[Bus]:
    connected = await connect(bus_config)
    await setup_nats(connected.js, deployment=DEPLOYMENT)
    try:
        yield connected
    finally:
        await connected.close()


async def test_a_worker_watcher_under_its_own_credentials_configures_nothing(
    bus: Bus, bus_config: BusConfig, events: EventLog
) -> None:
    # Taken (before the manager rule), east's MultiKueueCluster, stored first, made the manager
    # a worker: none of its configuration counted and the workload waited for ever.
    race = config_applied(worker("local"), cluster="east")
    manager = [
        config_applied(flavor()),
        config_applied(worker("east")),
        config_applied(cluster_queue()),
        config_applied(local_queue()),
    ]
    forged = [
        config_applied(cluster_queue(cpu="0"), cluster="east"),
        config_deleted("LocalQueue", "ns/lq", cluster="east"),
    ]
    east = await connect(as_user(bus_config, "watcher-east"))
    local = await connect(as_user(bus_config, "watcher-local"))
    admission = await start_admission(as_user(bus_config, "admission"))
    try:
        async with running(admission):
            await admission.wait_serving()
            await publish(east, race)  # the server takes each: east's own subjects
            await publish(local, *manager)
            await publish(east, *forged)
            await publish(local, submitted(workload("after")))
            await events.wait_for("admitted", workload="ns/after")
    finally:
        await east.close()
        await local.close()

    # What east may not send at all: the manager's own subjects (the server refuses it; no
    # PubAck comes).
    east = await connect(msgspec_replace(as_user(bus_config, "watcher-east"), publish_timeout_s=1))
    as_manager = config_applied(cluster_queue(cpu="0"))
    try:
        with pytest.raises(BusError):
            await publish(east, as_manager)
    finally:
        await east.close()
    assert as_manager.event_id not in {e.event_id for e in events.matching("config_applied")}

    reasons = await dead_letter_reasons(bus)
    assert reasons == {
        race.event_id: f"MultiKueueCluster local: applying it from cluster east is refused: "
        f"{NOT_MANAGER}",
        forged[
            0
        ].event_id: f"ClusterQueue cq: applying it from cluster east is refused: {A_WORKER}",
        forged[
            1
        ].event_id: f"LocalQueue ns/lq: deleting it from cluster east is refused: {A_WORKER}",
    }
