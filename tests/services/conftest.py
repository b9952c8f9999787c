"""Fixtures for service tests: a real nats-server with JetStream, a connected Bus, an event log.

- `nats_server`: the URL of a fresh nats-server (loopback, random port, JetStream in tmp_path).
- `nats_process`: the same server as a `NatsServer` (stop/start/restart on the same port and
  store directory); `restart_nats`: a callable that restarts it.
- `bus`: a connected `Bus` with the streams ensured.
- `events`: every envelope stored in MUSTER_EVENTS while the test runs, with
  `await events.wait_for("workload.admitted", workload="ns/name", timeout_s=5)`. (Not commands:
  MUSTER_COMMANDS is a work queue, where a second reader would take the binder's messages.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from bus_helpers import EventLog
from nats_process import NatsServer

from muster.bus import EVENTS_STREAM, Bus, BusConfig, connect


@pytest.fixture
def nats_process(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "nats")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_server(nats_process: NatsServer) -> str:
    """The URL of a running nats-server with JetStream, killed after the test."""
    return nats_process.url


@pytest.fixture
def restart_nats(nats_process: NatsServer) -> Callable[[], None]:
    """Restart the test's nats-server on the same port and store directory."""
    return nats_process.restart


@pytest.fixture
def bus_config(nats_server: str) -> BusConfig:
    return BusConfig(url=nats_server, name="muster-test", connect_timeout_s=5.0)


@pytest.fixture
async def bus(bus_config: BusConfig) -> AsyncIterator[Bus]:
    """A Bus connected to the test's nats-server, with muster's streams ensured."""
    connected = await connect(bus_config)
    await connected.ensure_streams()
    try:
        yield connected
    finally:
        await connected.close()


@pytest.fixture
async def events(bus: Bus) -> AsyncIterator[EventLog]:
    """Every envelope stored in MUSTER_EVENTS during the test (from its first message)."""
    log = EventLog()

    async def follow() -> None:
        async for env in bus.replay([">"], stream=EVENTS_STREAM, follow=True):
            await log.add(env)

    task = asyncio.create_task(follow())
    try:
        yield log
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
