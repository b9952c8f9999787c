"""One async function per consumed event type, and the resend timer's step.

`on_evicted` sends attempt 1 of `cmd.evict`; `on_eviction_completed` and `on_eviction_dropped`
(the binder's answer to a late eviction) end the flight; `resend`
sends the next attempt of every flight whose grace period is over, and gives up after the
last one: an error in the log and a copy of the `evicted` event in `MUSTER_DLQ`. With spans
recorded, each command sent is the span `preemption.evict`, in the victim's trace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from muster.bus.poison import Quarantine
from muster.bus.tracing import step
from muster.contracts.v1 import events_pb2 as pb
from muster.preemption.state import Evictions, Flight
from muster.preemption.translate import evict_command

log = logging.getLogger(__name__)

DURABLE = "preemption"


class Publisher(Protocol):
    async def publish(self, env: pb.Envelope) -> int: ...

    async def publish_raw(self, subject: str, data: bytes, headers: dict[str, str]) -> int: ...


@dataclass(slots=True)
class PreemptionContext:
    evictions: Evictions
    publisher: Publisher
    clock: Callable[[], float]
    source: str = "preemption"
    wake: Callable[[], None] = lambda: None  # the resend timer has a new deadline

    @property
    def dead_letters(self) -> Quarantine:
        return Quarantine(self.publisher, consumer=DURABLE)


async def on_evicted(env: pb.Envelope, ctx: PreemptionContext) -> None:
    """Ask the victim's cluster to stop its pods (attempt 1); a duplicate changes nothing."""
    flight = ctx.evictions.evicted(env, now_s=ctx.clock())
    if flight is None:
        return
    with step("preemption.evict", attributes=lambda: {"muster.workload": env.workload}):
        await ctx.publisher.publish(
            evict_command(flight.evicted, attempt=flight.attempt, source=ctx.source)
        )
    ctx.wake()


async def on_eviction_completed(env: pb.Envelope, ctx: PreemptionContext) -> None:
    """The pods are gone: stop re-sending."""
    if ctx.evictions.completed(env) is not None:
        log.info("eviction completed", extra={"workload": env.workload, "cluster": env.cluster})


async def on_eviction_dropped(env: pb.Envelope, ctx: PreemptionContext) -> None:
    """The binder dropped the eviction as late (the workload ended and its name was
    submitted again): a decided outcome, so no more re-sends and nothing dead-lettered."""
    if ctx.evictions.completed(env) is not None:
        log.info(
            "eviction dropped by the binder: the workload ended and its name was submitted again",
            extra={"workload": env.workload, "cluster": env.cluster},
        )


async def handle(env: pb.Envelope, ctx: PreemptionContext) -> None:
    match env.WhichOneof("payload"):
        case "evicted":
            await on_evicted(env, ctx)
        case "eviction_completed":
            await on_eviction_completed(env, ctx)
        case "eviction_dropped":
            await on_eviction_dropped(env, ctx)


async def resend(ctx: PreemptionContext) -> None:
    """Send the next attempt of every overdue eviction, or give it up after the last."""
    for due in ctx.evictions.due(now_s=ctx.clock()):
        flight = due.flight
        if due.give_up:
            await give_up(flight, ctx)
            continue
        log.info(
            "eviction not completed after a grace period; sending attempt %d",
            due.attempt,
            extra={"workload": flight.workload, "cluster": flight.evicted.cluster},
        )
        await ctx.publisher.publish(
            evict_command(flight.evicted, attempt=due.attempt, source=ctx.source)
        )


async def give_up(flight: Flight, ctx: PreemptionContext) -> None:
    """Log the failure and keep a copy of the eviction in the DLQ for operators."""
    reason = f"eviction not completed after {flight.attempt} attempts"
    await ctx.dead_letters.event(flight.evicted, reason)
