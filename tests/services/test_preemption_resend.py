"""The preemption service alone: re-sends, gives up, ignores duplicates, rebuilds on start."""

from __future__ import annotations

import pytest
from admission_world import (
    FakeBinder,
    fact,
    publish,
    start_preemption,
)

from muster.bus import DLQ_STREAM, Bus, BusConfig, dlq_subject, new_event
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(30)


def evicted(key: str, *, cluster: str = "local") -> pb.Envelope:
    payload = pb.WorkloadEvicted(reason="Preempted", message="to make room", preemptor="ns/u")
    return new_event("evicted", payload, cluster=cluster, workload=key, source="admission/0")


async def commands_until(binder: FakeBinder, n: int) -> None:
    await binder.wait_for(lambda commands: len(commands) >= n)


async def test_resends_with_the_next_attempt_until_completed(
    bus: Bus, bus_config: BusConfig
) -> None:
    preemption = await start_preemption(bus_config, resend_s=0.3, max_attempts=10)
    binder = FakeBinder(bus, mute=True).start()
    try:
        await preemption.wait_serving()
        victim = evicted("ns/v", cluster="east")
        await publish(bus, victim)
        await commands_until(binder, 3)
        first, second, third = binder.commands[:3]
        assert [c.evict_requested.attempt for c in (first, second, third)] == [1, 2, 3]
        assert {c.cluster for c in binder.commands} == {"east"}
        assert first.cause == victim.event_id
        assert first.evict_requested.reason == "Preempted"
        await publish(bus, fact("eviction_completed", "ns/v", cluster="east"))
        await publish(bus, evicted("ns/marker", cluster="east"))
        await binder.wait_for(  # a grace period passes for the marker
            lambda commands: any(
                c.workload == "ns/marker" and c.evict_requested.attempt == 2 for c in commands
            )
        )
        marker = next(i for i, c in enumerate(binder.commands) if c.workload == "ns/marker")
        late = [c for c in binder.commands[marker + 1 :] if c.workload == "ns/v"]
        assert len(late) <= 1  # at most one re-send already on its way when it completed
    finally:
        await binder.stop()
        await preemption.stop()


async def test_gives_up_after_max_attempts_and_keeps_a_dlq_copy(
    bus: Bus, bus_config: BusConfig
) -> None:
    preemption = await start_preemption(bus_config, resend_s=0.2, max_attempts=2)
    binder = FakeBinder(bus, mute=True).start()
    try:
        await preemption.wait_serving()
        victim = evicted("ns/stuck")
        await publish(bus, victim)
        copies = await bus.js.pull_subscribe(dlq_subject("preemption"), stream=DLQ_STREAM)
        (msg,) = await copies.fetch(1, timeout=5)
        assert pb.Envelope.FromString(msg.data).event_id == victim.event_id
        assert msg.headers is not None
        assert "2 attempts" in msg.headers["Muster-Dlq-Reason"]
        assert [c.evict_requested.attempt for c in binder.commands] == [1, 2]
    finally:
        await binder.stop()
        await preemption.stop()


async def test_a_duplicate_eviction_changes_nothing(bus: Bus, bus_config: BusConfig) -> None:
    preemption = await start_preemption(bus_config, resend_s=30)
    binder = FakeBinder(bus, mute=True).start()
    try:
        await preemption.wait_serving()
        await publish(bus, evicted("ns/v"), evicted("ns/v"))  # two ids, one eviction
        await commands_until(binder, 1)
        await publish(bus, evicted("ns/marker"))
        await commands_until(binder, 2)
        assert [c.workload for c in binder.commands] == ["ns/v", "ns/marker"]
    finally:
        await binder.stop()
        await preemption.stop()


async def test_restart_rebuilds_evictions_in_flight_and_keeps_resending(
    bus: Bus, bus_config: BusConfig
) -> None:
    first = await start_preemption(bus_config, resend_s=30)
    binder = FakeBinder(bus, mute=True).start()
    try:
        await first.wait_serving()
        await publish(bus, evicted("ns/open"), evicted("ns/done"))
        await commands_until(binder, 2)
        await publish(bus, fact("eviction_completed", "ns/done"))
        await first.kill()

        second = await start_preemption(bus_config, resend_s=0.3)
        try:
            await second.wait_serving()
            await commands_until(binder, 3)
            assert binder.commands[2].workload == "ns/open"
            assert binder.commands[2].evict_requested.attempt >= 2  # attempt 1 was a duplicate
            assert "ns/done" not in [c.workload for c in binder.commands[2:]]
        finally:
            await second.stop()
    finally:
        await binder.stop()
