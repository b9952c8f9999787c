"""An admission replica whose host is too busy to renew its shard lease steps down and comes
back, instead of ending (task "leaselost": under cProfile at load 21, admission lost its lease
and exited, and `muster bench e2e` stalled).

The loop is starved here as a busy host starves it: the test blocks it (`time.sleep`) for
several TTLs, so that NATS expires the lease while no renewal can run. What must hold after:
the replica goes on deciding (lone), or one of two replicas of the same shard does while the
other waits for the lease (standby), and no workload is decided twice.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from admission_world import (
    Running,
    basic_config,
    count,
    eventually,
    publish,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog

from muster.admission.decision_reads import DecisionReads
from muster.admission.lease import lease_key
from muster.bus import Bus, BusConfig
from muster.bus.buckets import SHARDS_BUCKET

pytestmark = pytest.mark.timeout(60)

TTL_S = 1.0  # short, so that a starved loop outlives it; a loss meanwhile is harmless now
STARVED_S = 3.5 * TTL_S  # NATS expires the lease while the loop is blocked
STEPPED_DOWN = "stepping down from shard 0"


def owner_of(replica: Running) -> str:
    """The value `replica` writes into its lease (admission/service.py `run_admission`)."""
    return f"{socket.gethostname()}/{os.getpid()}/{id(replica.health):x}"


async def holder(bus: Bus) -> str | None:
    entry = await (await bus.kv(SHARDS_BUCKET, ttl_s=TTL_S)).get(lease_key(0))
    return None if entry is None or entry.value is None else entry.value.decode()


def starve_the_loop() -> None:
    time.sleep(STARVED_S)  # the point: nothing on the loop runs meanwhile


async def test_a_lone_replica_starved_past_its_ttl_takes_its_lease_again_and_goes_on(
    bus: Bus, bus_config: BusConfig, events: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="muster.admission.service")
    admission = await start_admission(bus_config, lease_ttl_s=TTL_S, lease_renew_s=TTL_S / 4)
    try:
        await admission.wait_serving()
        await basic_config(bus, cpu="4")
        await publish(bus, submitted(workload("a", cpu="1")))
        await events.wait_for("admitted", workload="ns/a")

        starve_the_loop()

        await eventually(stepped_down(caplog, admission))
        why = step_downs(caplog)[0]  # a loaded host may lose it again later: harmless
        assert re.search(r"lease admission\.0 expired: .* this renewal ran [\d.]+s late", why)
        await admission.wait_serving()  # a new term: rebuilt, then serving again
        await publish(bus, submitted(workload("b", cpu="1")))
        await events.wait_for("admitted", workload="ns/b")
        assert not admission.task.done()
        assert await holder(bus) == owner_of(admission)
        assert count(events, "admitted", "ns/a") == 1  # the rebuild did not decide it again
        assert count(events, "admitted", "ns/b") == 1
    finally:
        await admission.stop()


async def test_of_two_replicas_of_a_shard_the_starved_one_steps_down_and_none_decides_twice(
    bus: Bus, bus_config: BusConfig, events: EventLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="muster.admission.service")
    settings = {"lease_ttl_s": TTL_S, "lease_renew_s": TTL_S / 4}
    first = await start_admission(bus_config, **settings)
    await first.wait_serving()
    second = await start_admission(bus_config, **settings)  # waits for the lease
    replicas = (first, second)
    try:
        await basic_config(bus, cpu="2")
        await publish(bus, submitted(workload("a", cpu="1")))
        await events.wait_for("admitted", workload="ns/a")

        starve_the_loop()

        await eventually(stepped_down(caplog, *replicas))
        await publish(bus, submitted(workload("b", cpu="1")), submitted(workload("c", cpu="1")))
        await events.wait_for("admitted", workload="ns/b")
        await events.wait_for("pending", workload="ns/c")  # a is still running: quota is full
        assert not any(r.task.done() for r in replicas)  # the loser waits for the lease

        # Whoever holds it now goes; the other takes over, rebuilt, and decides from there.
        owners = {owner_of(r): r for r in replicas}
        await eventually(lambda: _held_by(bus, owners))
        held = await holder(bus)
        assert held is not None
        await owners.pop(held).stop()
        (standby,) = owners.values()
        await standby.wait_serving()
        await publish(bus, submitted(workload("d", cpu="3")))
        await events.wait_for("pending", workload="ns/d")
        assert await holder(bus) == owner_of(standby)
        for name in ("a", "b"):
            assert count(events, "admitted", f"ns/{name}") == 1
        assert count(events, "admitted", "ns/c") == 0
    finally:
        for replica in replicas:
            await replica.stop()


async def test_a_holder_starved_between_deciding_and_publishing_publishes_nothing_of_it(
    bus: Bus,
    bus_config: BusConfig,
    events: EventLog,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop is starved in the middle of the holder's round, after its decision about
    ns/slow and before the send: the lease lapses before the renewal can tell it so. That
    decision must not land (a successor may be deciding on the same quota by then): the
    holder steps down, and ns/slow is decided once, by the term that rebuilt after."""
    caplog.set_level(logging.WARNING, logger="muster.admission.service")
    decide = DecisionReads.decisions
    starved: list[bool] = []

    def starving(self: DecisionReads, decided: Sequence[Any]) -> Any:
        if not starved and any(event.object == "ns/slow" for event in decided):
            starved.append(True)
            starve_the_loop()
        return decide(self, decided)

    monkeypatch.setattr(DecisionReads, "decisions", starving)
    settings = {"lease_ttl_s": TTL_S, "lease_renew_s": TTL_S / 4}
    first = await start_admission(bus_config, **settings)
    await first.wait_serving()
    second = await start_admission(bus_config, **settings)
    replicas = (first, second)
    try:
        await basic_config(bus, cpu="2")
        await publish(bus, submitted(workload("slow", cpu="1")))
        admitted = await events.wait_for("admitted", workload="ns/slow")
        await eventually(stepped_down(caplog, *replicas))
        assert starved
        assert admitted.cause.startswith("rebuild/admission/0/"), admitted.cause
        await publish(bus, submitted(workload("next", cpu="1")))
        await events.wait_for("admitted", workload="ns/next")
        assert count(events, "admitted", "ns/slow") == 1
    finally:
        for replica in replicas:
            await replica.stop()


def step_downs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if STEPPED_DOWN in r.getMessage()]


def stepped_down(
    caplog: pytest.LogCaptureFixture, *replicas: Running
) -> Callable[[], Awaitable[bool]]:
    """Whether one of `replicas` said it stepped down; raises what ended one instead."""

    async def check() -> bool:
        for replica in replicas:
            if replica.task.done():
                replica.task.result()
                raise AssertionError("the replica ended")
        return bool(step_downs(caplog))

    return check


async def _held_by(bus: Bus, owners: dict[str, Running]) -> bool:
    return await holder(bus) in owners
