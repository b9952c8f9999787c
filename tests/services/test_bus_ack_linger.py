"""Acks that wait for the connection's next write: they leave with it, or after their linger,
and a process killed while they wait has its messages redelivered and handled once more."""

from __future__ import annotations

import asyncio
import collections
import signal
import sys
from pathlib import Path

import pytest
from budget import seconds_left
from bus_helpers import SUBMITTED, Recorder, consuming, pending, submitted

from muster.bus import EVENTS_STREAM, Bus, BusConfig, ConsumerSettings, connect
from muster.contracts.v1.events_pb2 import Envelope

pytestmark = pytest.mark.timeout(60)

LINGERING = Path(__file__).with_name("lingering_acks_consumer.py")


async def ack_pending(bus: Bus, durable: str) -> int:
    info = await bus.js.consumer_info(EVENTS_STREAM, durable)
    return int(info.num_ack_pending)


async def until_acked(bus: Bus, durable: str) -> None:
    """Wait until `durable` has nothing delivered and unacked, nor left to deliver."""
    while True:
        info = await bus.js.consumer_info(EVENTS_STREAM, durable)
        if info.num_ack_pending == 0 and info.num_pending == 0:
            return
        await asyncio.sleep(0.05)  # polling the server's state; bounded by the caller


async def test_an_ack_waits_for_the_next_write_and_leaves_with_it(
    bus: Bus, bus_config: BusConfig
) -> None:
    # The consumer on a connection of its own: the test's requests (on `bus`) would carry it.
    consumer = await connect(bus_config)
    try:
        handler = Recorder()
        settings = ConsumerSettings(ack_linger_s=20.0, request_expiry_s=30.0, ack_wait_s=30.0)
        await bus.publish(submitted("ns/a"))
        task = asyncio.create_task(consumer.consume_with("linger", [SUBMITTED], handler, settings))
        try:
            await handler.wait_for_count(1)
            # Handled, its ack held: nothing else went out on the consumer's connection.
            assert await ack_pending(bus, "linger") == 1
            await consumer.publish(pending("ns/b", "a write of the consumer's process"))
            # Long before the linger's 20 s: the ack left with that publish.
            await asyncio.wait_for(until_acked(bus, "linger"), 5)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await consumer.close()


async def test_an_ack_left_alone_goes_after_its_linger(bus: Bus) -> None:
    handler = Recorder()
    await bus.publish(submitted("ns/a"))
    async with consuming(bus, "linger", [SUBMITTED], handler):
        await handler.wait_for_count(1)
        await asyncio.wait_for(until_acked(bus, "linger"), seconds_left())


async def test_a_process_killed_with_acks_waiting_has_its_messages_redelivered_once(
    bus: Bus, nats_server: str
) -> None:
    envs = [submitted(f"ns/w{i}") for i in range(6)]
    for env in envs:
        await bus.publish(env)
    ack_wait_s = 3.0
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(LINGERING), "--nats", nats_server, "--subject", SUBMITTED,
        "--ack-wait-seconds", str(ack_wait_s), "--ack-linger-seconds", str(ack_wait_s - 0.5),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        handled: list[str] = []
        while len(handled) < len(envs):
            line = await asyncio.wait_for(proc.stdout.readline(), seconds_left())
            assert line, "the lingering consumer exited"
            if line.startswith(b"handled "):
                handled.append(line.split()[1].decode())
        held = await ack_pending(bus, "lingering")
        proc.send_signal(signal.SIGKILL)  # its acks still waiting for a write
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert sorted(handled) == sorted(env.event_id for env in envs)
    assert held > 0, "no ack was waiting when the process was killed"

    # Restarted: what it handled and never acked comes again after the ack wait, once each.
    again = Recorder()
    settings = ConsumerSettings(ack_wait_s=ack_wait_s)
    task = asyncio.create_task(bus.consume_with("lingering", [SUBMITTED], again, settings))
    try:
        got: list[Envelope] = await again.wait_for_count(held, timeout_s=seconds_left())
        await asyncio.wait_for(until_acked(bus, "lingering"), seconds_left())
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    copies = collections.Counter(env.event_id for env in again.got)
    assert len(got) == held
    assert set(copies) <= set(handled)
    assert max(copies.values()) == 1
