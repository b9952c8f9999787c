"""A large Job through the pod path (binder, gang-permit, watcher, on a real nats-server): its
pods are made, placed and bound whole while another workload's go ahead, and the services stay
alive throughout (a 10 000-pod Job once got the watcher and gang-permit killed by their
liveness probes: every pod made at once, and every pod change re-reading every pod).

"Alive" is judged in the event loop's own CPU time, not the wall clock: what held the loop
then was computing (CPU spent on the loop's thread), while on a loaded 2-core CI machine the
wall clock also counts the time the process waited for a core, which no fix here changes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from bus_helpers import EventLog
from placement_stack import Stack, bare_nodes_stack, submit_and_admit

from muster.bus import Bus
from muster.bus.watchdog import watch_progress

pytestmark = pytest.mark.timeout(90)

PODS = 3000  # seconds here; minutes of blocked loop before pods were made in batches
NODES = 30  # 110 pods each
# How long a probe waits for an answer before counting a failure (the kubelet's
# timeoutSeconds, as `muster up` sets it): the loop must never compute that long unbroken.
PROBE_TIMEOUT_S = 5.0


class Probe:
    """What a liveness probe of the in-process services sees: the watchdog's verdicts
    (a consume loop stalled), and the most CPU the loop's thread spent between asking for
    a tick and answering it (`time.thread_time`: the loop runs on this thread)."""

    def __init__(self) -> None:
        self.verdicts: list[bool] = []
        self.longest_cpu_s = 0.0

    def alive(self, alive: bool) -> None:
        self.verdicts.append(alive)

    async def tick(self) -> None:
        while True:
            asked = time.thread_time()
            await asyncio.sleep(0.05)
            self.longest_cpu_s = max(self.longest_cpu_s, time.thread_time() - asked)


@contextlib.asynccontextmanager
async def probed(bus: Bus) -> AsyncIterator[Probe]:
    probe = Probe()
    tasks = [
        asyncio.create_task(probe.tick()),
        asyncio.create_task(
            watch_progress(bus, stall_s=5.0, alive=probe.alive, ready=lambda: True)
        ),
    ]
    try:
        yield probe
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with bare_nodes_stack(bus, events, nodes=NODES) as s:
        yield s


async def test_a_large_job_is_bound_whole_while_a_later_small_one_goes_ahead(
    stack: Stack, bus: Bus, events: EventLog
) -> None:
    async with probed(bus) as probe:
        big = await submit_and_admit(stack, "big", count=PODS, cpu="100m")
        small = await submit_and_admit(stack, "small", count=1, cpu="100m")
        small_bound = await events.wait_for("bound", workload=small, timeout_s=60)
        big_bound = await events.wait_for("bound", workload=big, timeout_s=80)

    # The small one did not wait for the big one's pods to be made, placed and bound.
    assert small_bound.sequence < big_bound.sequence
    # The big one bound whole, by one permit, each pod once, where the permit placed it.
    permits = events.matching("gang_permitted", workload=big)
    assert len(permits) == 1
    assert events.matching("gang_rejected", workload=big) == []
    placed = {b.pod.name: b.node for b in permits[0].gang_permitted.bindings}
    assert len(placed) == PODS
    assert {b.pod.name: b.node for b in big_bound.bound.bindings} == placed
    pods = await stack.pods_of(big)
    assert sorted(p.name for p in pods) == sorted(f"big-main-{i}" for i in range(PODS))
    assert {p.name: p.node_name for p in pods} == placed
    # Alive throughout: no consume loop judged stalled, no probe left unanswered.
    assert False not in probe.verdicts
    assert probe.longest_cpu_s < PROBE_TIMEOUT_S
