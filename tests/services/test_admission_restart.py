"""A killed admission replica's successor rebuilds from the stream: nothing lost, none twice."""

from __future__ import annotations

import pytest
from admission_world import (
    basic_config,
    count,
    drained,
    fact,
    publish,
    start_admission,
    submitted,
    workload,
)

from muster.bus import Bus, BusConfig

pytestmark = pytest.mark.timeout(60)


async def test_restart_keeps_admissions_and_admits_pending_ones_later(
    bus: Bus, bus_config: BusConfig, events
) -> None:
    first = await start_admission(bus_config)
    await first.wait_serving()
    await basic_config(bus, cpu="4")
    names = [f"w{i}" for i in range(1, 7)]
    await publish(bus, *(submitted(workload(n, cpu="1")) for n in names))
    for n in names[:4]:
        await events.wait_for("admitted", workload=f"ns/{n}")
    for n in names[4:]:
        await events.wait_for("pending", workload=f"ns/{n}")
    await first.kill()

    # While no replica runs: one finishes, one more arrives.
    await publish(bus, fact("finished", "ns/w1"), submitted(workload("w7", cpu="1")))
    second = await start_admission(bus_config)
    try:
        await second.wait_serving()
        await events.wait_for("admitted", workload="ns/w5")
        await publish(bus, fact("finished", "ns/w2"), fact("finished", "ns/w3"))
        await events.wait_for("admitted", workload="ns/w6")
        await events.wait_for("admitted", workload="ns/w7")
        await drained(bus, "admission-0")
        for n in [*names, "w7"]:
            assert count(events, "quota_reserved", f"ns/{n}") == 1, n
            assert count(events, "admitted", f"ns/{n}") == 1, n
    finally:
        await second.stop()


async def test_kill_during_a_burst_loses_nothing_and_admits_nothing_twice(
    bus: Bus, bus_config: BusConfig, events
) -> None:
    first = await start_admission(bus_config)
    await first.wait_serving()
    await basic_config(bus, cpu="10")
    names = [f"b{i:02d}" for i in range(30)]
    await publish(bus, *(submitted(workload(n, cpu="1")) for n in names))
    await events.wait_for("quota_reserved")
    await first.kill()  # somewhere in the middle of the burst

    second = await start_admission(bus_config)
    try:
        await second.wait_serving()
        finished: set[str] = set()
        while len(finished) < len(names):
            await drained(bus, "admission-0")
            admitted = {e.workload for e in events.matching("admitted")}
            wave = sorted(admitted - finished)
            assert wave, f"nothing admitted beyond {sorted(finished)}"
            await publish(bus, *(fact("finished", key) for key in wave))
            finished |= set(wave)
        await drained(bus, "admission-0")
        for n in names:
            assert count(events, "quota_reserved", f"ns/{n}") == 1, n
    finally:
        await second.stop()
