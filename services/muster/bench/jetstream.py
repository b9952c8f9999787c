"""JetStream's own publish+ack rate on a server, as the yardstick for `bench e2e`.

muster's events cost what JetStream charges for a stored, acknowledged message; measuring that
on the same nats-server in the same run says how much of the server's capacity one workload's
events take, and so how far a faster muster could go on it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig

STREAM: Final = "MUSTER_BENCH_YARDSTICK"
SUBJECT: Final = "muster-bench.yardstick"


async def publish_ack_rate(
    js: JetStreamContext, *, messages: int = 2000, size: int = 300, in_flight: int = 256
) -> float:
    """Messages per second JetStream stores and acknowledges: `messages` of `size` bytes to a
    file-backed stream of their own (as MUSTER_EVENTS is), `in_flight` at a time, each awaited
    for its ack as muster's publisher awaits them. The stream is deleted afterwards."""
    await js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE))
    try:
        payload = b"x" * size
        limit = asyncio.Semaphore(in_flight)

        async def one() -> None:
            async with limit:
                await js.publish(SUBJECT, payload)

        start = time.monotonic()
        await asyncio.gather(*(one() for _ in range(messages)))
        return messages / max(time.monotonic() - start, 1e-9)
    finally:
        await js.delete_stream(STREAM)
