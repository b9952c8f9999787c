"""A poison message among messages whose acks linger, and the consumer SIGKILLed once it has
dead-lettered it, its acks still waiting for a write: the poison reaches the dead-letter
stream once (its copy deduplicated per message and consumer, so dead-lettering it again after
the kill stores nothing more), is never handed to a handler, and every good message is handled
by the killed process or by the next, none twice by the next."""

from __future__ import annotations

import asyncio
import collections
import signal
import sys

import pytest
from budget import seconds_left
from bus_helpers import SUBMITTED, Recorder, submitted
from test_bus_ack_linger import LINGERING, until_acked

from muster.bus import DLQ_STREAM, Bus, ConsumerSettings
from muster.bus.subjects import dlq_subject

pytestmark = pytest.mark.timeout(60)

DURABLE = "lingering"  # lingering_acks_consumer.DURABLE
POISON = b"\xff\x00 not an envelope"


async def dead_letters(bus: Bus) -> list[int]:
    """The stream sequences of the messages `DURABLE` dead-lettered, one per copy stored."""
    info = await bus.js.stream_info(DLQ_STREAM, subjects_filter=dlq_subject(DURABLE))
    return [] if not info.state.messages else await _sequences(bus, info.state.messages)


async def _sequences(bus: Bus, count: int) -> list[int]:
    out = []
    for seq in range(1, count + 1):
        msg = await bus.js.get_msg(DLQ_STREAM, seq)
        out.append(int((msg.headers or {})["Muster-Dlq-Sequence"]))
    return out


async def until_dead_lettered(bus: Bus) -> None:
    while True:
        if await dead_letters(bus):
            return
        await asyncio.sleep(0.05)  # polling the server's state; bounded by the caller


async def test_a_poison_among_lingering_acks_is_dead_lettered_once_across_a_kill(
    bus: Bus, nats_server: str
) -> None:
    good = [submitted(f"ns/w{i}") for i in range(6)]
    for env in good[:3]:
        await bus.publish(env)
    poison_seq = (await bus.js.publish(SUBMITTED, POISON)).seq
    for env in good[3:]:
        await bus.publish(env)
    ack_wait_s = 3.0
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(LINGERING), "--nats", nats_server, "--subject", SUBMITTED,
        "--ack-wait-seconds", str(ack_wait_s), "--ack-linger-seconds", str(ack_wait_s - 0.5),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    handled: list[str] = []
    try:
        assert proc.stdout is not None
        while len(handled) < len(good):
            line = await asyncio.wait_for(proc.stdout.readline(), seconds_left())
            assert line, "the lingering consumer exited"
            if line.startswith(b"handled "):
                handled.append(line.split()[1].decode())
        await asyncio.wait_for(until_dead_lettered(bus), seconds_left())
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert sorted(handled) == sorted(env.event_id for env in good)

    # Restarted: whatever comes again is handled once, the poison never.
    again = Recorder()
    settings = ConsumerSettings(ack_wait_s=ack_wait_s)
    task = asyncio.create_task(bus.consume_with(DURABLE, [SUBMITTED], again, settings))
    try:
        await asyncio.wait_for(until_acked(bus, DURABLE), seconds_left())
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    copies = collections.Counter(env.event_id for env in again.got)
    assert set(copies) <= set(handled)
    assert max(copies.values(), default=1) == 1
    assert await dead_letters(bus) == [poison_seq]
