"""Admission takes an eviction_completed only for the workload's current eviction.

A gang that timed out is evicted (reason GangRejected): the eviction this file completes,
late or on time, as a binder would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from admission_world import (
    Running,
    basic_config,
    fact,
    publish,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.bus import Bus, BusConfig
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def admission(bus: Bus, bus_config: BusConfig) -> AsyncIterator[Running]:
    running = await start_admission(bus_config)
    await running.wait_serving()
    await basic_config(bus, cpu="4")
    try:
        yield running
    finally:
        await running.stop()


def completed(evicted: pb.Envelope | None) -> pb.Envelope:
    """The binder's eviction_completed for `evicted` (None: one naming no eviction, as a
    binder from before evictions were named wrote it)."""
    payload = pb.EvictionCompleted()
    if evicted is not None:
        payload.eviction_id = evicted.event_id
        payload.eviction_sequence = evicted.sequence
    return fact("eviction_completed", evicted.workload if evicted else "ns/a", payload)


async def evicted_and_admitted_again(bus: Bus, events: EventLog) -> pb.Envelope:
    """Admit ns/a, time its gang out, complete that eviction: admitted again. The eviction."""
    await publish(bus, submitted(workload("a", cpu="3")))
    await events.wait_for("admitted", workload="ns/a")
    timed_out = pb.GangRejected(reason="GangTimedOut", message="1 of 2 pods fit")
    await publish(bus, fact("gang_rejected", "ns/a", timed_out))
    evicted = await events.wait_for("evicted", workload="ns/a")
    await publish(bus, completed(evicted))
    await events.wait_for("requeued", workload="ns/a")
    second = await events.wait_for_next("admitted", after=evicted)
    assert second.workload == "ns/a"
    return evicted


async def test_a_late_completion_of_an_earlier_eviction_does_not_complete_the_current_one(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    first = await evicted_and_admitted_again(bus, events)
    timed_out = pb.GangRejected(reason="GangTimedOut", message="again")
    await publish(bus, fact("gang_rejected", "ns/a", timed_out))
    second = await events.wait_for_next("evicted", after=first)  # its pods are still running

    await publish(bus, completed(first))  # attempt 1's, redelivered late
    await publish(bus, submitted(workload("b", cpu="2")))
    pending = await events.wait_for("pending", workload="ns/b")
    assert "1 more needed" in pending.pending.message  # ns/a still holds 3 of 4
    assert len(events.matching("requeued", workload="ns/a")) == 1

    await publish(bus, completed(second))
    await events.wait_for_next("requeued", after=second)


async def test_a_completion_naming_no_eviction_while_admitted_evicts_it_to_be_requeued(
    bus: Bus, admission: Running, events: EventLog
) -> None:
    first = await evicted_and_admitted_again(bus, events)

    # A binder from before evictions were named stopped every pod of ns/a, the new admission's
    # too: holding quota with no pods, it would never finish.
    await publish(bus, completed(None))
    again = await events.wait_for_next("evicted", after=first)
    assert again.evicted.reason == "PodsStopped"
    await publish(bus, completed(again))
    await events.wait_for_next("requeued", after=again)
