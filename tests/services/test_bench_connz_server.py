"""bench.connz and e2e's warm-up against a real nats-server with its monitoring port."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.js import api

from muster.bench.connz import read_traffic
from muster.bench.e2e import wait_partitions_told
from muster.bus.buckets import PARTITIONS_BUCKET
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
    # Named as a floor stand-in: its calls (by pid label) and its messages are one row.
    nc = await nats.connect(monitored.url, name="muster-floor-tester")
    try:
        js = nc.jetstream()
        await js.add_stream(api.StreamConfig(name="S", subjects=["s.>"]))
        assert monitored.process is not None
        pids = {"tester": os.getpid(), "nats-server": monitored.process.pid}
        before = await read_traffic(monitored.monitor_url, pids)
        for i in range(3):
            await js.publish(f"s.{i}", b"x" * 10)
        after = await read_traffic(monitored.monitor_url, pids)
    finally:
        await nc.close()
    grew = {k: v - before["tester"].counts[k] for k, v in after["tester"].counts.items()}
    assert grew["in_msgs"] == 3
    assert grew["replies"] == 3  # each PubAck, on the request inbox
    assert grew["inbox"] == 0
    assert after["tester"].counts["read_calls"] > 0  # the pid's calls, in the same row
    server = after["nats-server"].counts
    # Go reads its sockets with read(2), which /proc/<pid>/io counts (send/recv it would not).
    assert server["read_calls"] > before["nats-server"].counts["read_calls"]
    assert server["in_msgs"] == 0  # a process with no connection of its own: calls only


async def test_the_warm_up_waits_until_every_follower_was_handed_every_partition(
    monitored: NatsServer,
) -> None:
    nc = await nats.connect(monitored.url)
    try:
        js = nc.jetstream()
        kv = await js.create_key_value(bucket=PARTITIONS_BUCKET)
        await kv.put("lq.bench.lq-0", b"14")
        await kv.put("lq.bench.lq-1", b"8")
        # A follower that has not been handed the entries yet (pulls on demand).
        follower = await js.pull_subscribe("$KV.MUSTER_PARTITIONS.>", durable="follower")
        assert not await wait_partitions_told(js, 2, timeout_s=0.3)
        assert len(await follower.fetch(2, timeout=5)) == 2
        assert await wait_partitions_told(js, 2, timeout_s=5)
        assert not await wait_partitions_told(js, 3, timeout_s=0.3)  # a queue not written
    finally:
        await nc.close()


def test_a_monitoring_port_is_refused_beside_a_deployment(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="monitoring port"):
        NatsServer(tmp_path, deployment=Deployment(clusters=("local",)), monitor=True)
