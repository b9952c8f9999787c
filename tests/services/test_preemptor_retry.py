"""A gang outside Kueue preempts a lower-priority gang whose pods are slow to stop (on a real
nats-server, the pod-path services in-process): its deadline passes while they still run, so it
times out; once they are gone it is tried again and bound on the room they left, also when
gang-permit restarted in between.

The binder reaches the cluster through `SlowToStop`, whose deletes wait until the test lets
them go on, as pods with a long termination grace period do.
"""

from __future__ import annotations

import asyncio

import pytest
from bus_helpers import EventLog
from placement_stack import preemption_stack

from muster.bus import Bus
from muster.cluster.sim.backend import SimBackend

pytestmark = pytest.mark.timeout(60)

VICTIM, VICTIM_PODS, PREEMPTOR = "ns/low", "ns/low/workers", "ns/high/workers"
DEADLINE_S = 2.0  # gang-permit's default gang deadline here: passes while the victims stop


class SlowToStop(SimBackend):
    """The sim cluster as the binder reaches it: a delete waits for `stop`."""

    def __init__(self, backend: SimBackend) -> None:
        super().__init__(backend.store)
        self.stop = asyncio.Event()

    async def delete(self, kind: str, name: str, *, namespace: str = "", uid: str = "") -> bool:
        await self.stop.wait()
        return await super().delete(kind, name, namespace=namespace, uid=uid)


@pytest.mark.parametrize(
    "restarted", [pytest.param(False, id="running"), pytest.param(True, id="gangpermit-restarted")]
)
async def test_a_preemptor_timed_out_while_its_victims_stop_is_bound_once_they_are_gone(
    bus: Bus, events: EventLog, restarted: bool
) -> None:
    slow: list[SlowToStop] = []

    def slow_to_stop(backend: SimBackend) -> SlowToStop:
        slow.append(SlowToStop(backend))
        return slow[0]

    config = {"gang_timeout_s": DEADLINE_S}
    stack = preemption_stack(bus, events, binder_backend=slow_to_stop, gangpermit=config)
    async with stack as s:
        preempted = await events.wait_for("placement_preempted", workload=PREEMPTOR, timeout_s=20)
        assert list(preempted.placement_preempted.victims) == [VICTIM]
        rejected = await events.wait_for("gang_rejected", workload=PREEMPTOR, timeout_s=20)
        assert rejected.gang_rejected.reason == "GangTimedOut"
        assert len(await s.pods_of(VICTIM_PODS)) == 4  # still stopping
        if restarted:  # it reads the time-out back from the stream
            await s.stop("gangpermit")
            await s.start_gangpermit(**config)

        slow[0].stop.set()
        bound = await events.wait_for("bound", workload=PREEMPTOR, timeout_s=20)

        assert [b.node for b in bound.bound.bindings] == ["n0"]
        assert await s.pods_of(VICTIM_PODS) == []
        if not restarted:  # the room was free when it was tried again
            assert events.matching("placement_preempted", workload=PREEMPTOR) == [preempted]
