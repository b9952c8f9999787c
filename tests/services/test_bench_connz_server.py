"""bench.connz against a real nats-server with its monitoring port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.js import api

from muster.bench.connz import read_traffic
from muster.bus.permissions import Deployment
from muster.launcher.nats_server import NatsServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def monitored(tmp_path: Path) -> AsyncIterator[NatsServer]:
    server = NatsServer(tmp_path / "js", monitor=True)
    await server.start(log_path=tmp_path / "nats-server.log")
    try:
        yield server
    finally:
        await server.stop()


async def test_a_named_connection_counts_its_publishes_in_and_their_puback_replies_out(
    monitored: NatsServer,
) -> None:
    assert monitored.monitor_url is not None
    nc = await nats.connect(monitored.url, name="muster-tester")
    try:
        js = nc.jetstream()
        await js.add_stream(api.StreamConfig(name="S", subjects=["s.>"]))
        before = await read_traffic(monitored.monitor_url)
        for i in range(3):
            await js.publish(f"s.{i}", b"x" * 10)
        after = await read_traffic(monitored.monitor_url)
    finally:
        await nc.close()
    grew = {
        k: v - before["muster-tester"].counts[k] for k, v in after["muster-tester"].counts.items()
    }
    assert grew["in_msgs"] == 3
    assert grew["replies"] == 3  # each PubAck, on the request inbox
    assert grew["inbox"] == 0


def test_a_monitoring_port_is_refused_beside_a_deployment(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="monitoring port"):
        NatsServer(tmp_path, deployment=Deployment(clusters=("local",)), monitor=True)
