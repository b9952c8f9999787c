"""The preemption service's wiring: rebuild the evictions in flight, consume, resend.

`run_preemption(bus, health, config)` creates the durable consumer `preemption` (if missing,
starting at the stream's end), replays `evicted` and its answers (`eviction_completed`,
`eviction_dropped`) from `MUSTER_EVENTS` to rebuild the evictions in flight, re-sends their
current attempt (same ids: JetStream drops what was already stored), then consumes and runs
the resend timer; it reports SERVING.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

import msgspec

from muster.bus import EVENTS_STREAM, Bus, ConsumerSettings, workload_filters
from muster.bus.cancel import raise_if_cancelling
from muster.bus.pulse import Pulse
from muster.bus.service import Health
from muster.bus.supervision import SupervisedGroup
from muster.contracts.v1 import events_pb2 as pb
from muster.preemption.handlers import DURABLE, PreemptionContext, handle, resend
from muster.preemption.state import Evictions
from muster.preemption.translate import evict_command

SUBJECTS: Final = (
    *workload_filters("*", "evicted"),
    *workload_filters("*", "eviction_completed"),
    *workload_filters("*", "eviction_dropped"),
)

log = logging.getLogger(__name__)


class PreemptionConfig(msgspec.Struct, frozen=True, kw_only=True):
    resend_s: float = 30.0  # grace period before an eviction is asked for again
    max_attempts: int = 10
    lanes: int = 8

    def __post_init__(self) -> None:
        if self.resend_s <= 0:
            raise ValueError(f"--evict-grace-seconds must be > 0, got {self.resend_s:g}")
        if self.max_attempts < 1:
            raise ValueError(f"--max-attempts must be >= 1, got {self.max_attempts}")


async def run_preemption(
    bus: Bus,
    health: Health,
    config: PreemptionConfig,
    *,
    clock: Callable[[], float] = time.time,
) -> None:
    """Rebuild, then execute evictions until cancelled."""
    evictions = Evictions(resend_s=config.resend_s, max_attempts=config.max_attempts)
    wake = asyncio.Event()
    ctx = PreemptionContext(evictions, bus.publisher, clock, wake=wake.set)
    settings = ConsumerSettings(stream=EVENTS_STREAM, lanes=config.lanes, deliver_new=True)
    await bus.add_consumer(DURABLE, SUBJECTS, settings)
    end = await rebuild(bus, evictions, clock=clock)

    async def handler(env: pb.Envelope) -> None:
        if env.sequence <= end:
            return  # in the rebuild already
        await handle(env, ctx)

    async with SupervisedGroup() as tg:
        tg.create_task(
            bus.consume_with(DURABLE, SUBJECTS, handler, settings), name="preemption-consumer"
        )
        pulse = bus.pulses.pulse("preemption-resend")
        tg.create_task(resend_forever(ctx, wake, pulse), name="preemption-resend")
        health.ready()


async def rebuild(bus: Bus, evictions: Evictions, *, clock: Callable[[], float]) -> int:
    """Replay evicted minus its answers; re-send what is in flight. The replay's end."""
    end = await bus.last_sequence(EVENTS_STREAM)
    async for env in bus.replay(list(SUBJECTS), until_sequence=end):
        if env.WhichOneof("payload") == "evicted":
            evictions.evicted(env, now_s=clock())
        else:
            evictions.completed(env)
    for flight in list(evictions.flights.values()):
        await bus.publish(evict_command(flight.evicted, attempt=flight.attempt))
    log.info("rebuilt to sequence %d: %d evictions in flight", end, len(evictions))
    return end


async def resend_forever(ctx: PreemptionContext, wake: asyncio.Event, pulse: Pulse) -> None:
    """Re-send each eviction when it is due, until cancelled; `pulse` says when that is."""
    while True:
        raise_if_cancelling()  # nats-py may swallow a cancellation (3.11)
        due = ctx.evictions.next_due_s()
        timeout = None if due is None else max(0.0, due - ctx.clock())
        pulse.beat(timeout)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await wake.wait()
        wake.clear()
        try:
            await resend(ctx)
        except Exception:  # NATS trouble: the flights stay due, the next pass retries
            log.exception("re-sending evictions failed")
            await asyncio.sleep(1.0)
