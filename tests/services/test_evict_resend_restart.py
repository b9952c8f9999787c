"""Gang-permit killed and restarted while a placement eviction goes unanswered (on a real
nats-server, the pod-path services in-process): its back-off is carried across the restart
(from the preemptor's `placement_preempted`), and the re-send due by then, which may have
fallen due while it was down, goes at once (task evictfix), as the next attempt with an id
never sent before, not one back-off after the restart as the first re-send again; once a
binder runs, the victim's pods are stopped once, and every copy is answered, the first with
the pods it stopped, the others with none stopped. Commands live in a
work queue the restart cannot read back; unit tests drive the arithmetic
(tests/unit/gangpermit/test_gangpermit_evict_resend_restart.py), this the services
(task checks3)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from bus_helpers import EventLog
from nats.aio.msg import Msg
from placement_stack import CLUSTER, gang_yaml, node, placement_stack

from muster.bus import Bus, command_subject
from muster.bus.envelope import decode
from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import events_pb2 as pb
from muster.gateway.eventtext import detail

pytestmark = pytest.mark.timeout(90)

VICTIM, VICTIM_PODS, PREEMPTOR = "ns/low", "ns/low/workers", "ns/high/workers"
RESEND_S = 2.0  # sent at T, re-sent at T+2, T+6, T+14: doubling
SETTINGS = {"evict_resend_s": RESEND_S, "gang_timeout_s": 120.0}  # the preemptor waits


class CountsDeletes(SimBackend):
    """The sim cluster as the binder reaches it, counting the pods it deletes (a delete
    naming a pod gone already deletes nothing)."""

    def __init__(self, backend: SimBackend) -> None:
        super().__init__(backend.store)
        self.deletes: list[str] = []

    async def delete(self, kind: str, name: str, *, namespace: str = "", uid: str = "") -> bool:
        deleted = await super().delete(kind, name, namespace=namespace, uid=uid)
        if deleted:
            self.deletes.append(name)
        return deleted


class Evicts:
    """Every `cmd.evict` of the victim as published (a plain subscription: no binder takes
    them from the work queue while none runs, and JetStream's copies dropped as duplicates
    are seen too)."""

    def __init__(self) -> None:
        self.seen: list[pb.Envelope] = []
        self.changed = asyncio.Condition()

    async def start(self, bus: Bus) -> None:
        async def got(msg: Msg) -> None:
            env = decode(msg.data)
            if env.workload == VICTIM:
                async with self.changed:
                    self.seen.append(env)
                    self.changed.notify_all()

        await bus.nc.subscribe(command_subject(CLUSTER, "evict"), cb=got)

    async def first(self, found: Callable[[pb.Envelope], bool], *, since: int) -> pb.Envelope:
        """The first one from the `since`-th on for which `found` holds, waiting for it."""

        def match() -> pb.Envelope | None:
            return next((e for e in self.seen[since:] if found(e)), None)

        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: match() is not None), 30)
        env = match()
        assert env is not None
        return env


async def test_a_restart_carries_an_unanswered_eviction_s_back_off_and_evicts_once(
    bus: Bus, events: EventLog
) -> None:
    counting: list[CountsDeletes] = []
    evicts = Evicts()
    await evicts.start(bus)
    async with placement_stack(bus, events, kubelet=False, gangpermit=SETTINGS) as s:
        await s.backend.apply(node("n0", cpu="4"))
        await s.apply_all(gang_yaml("low", pods=4))
        await s.wait_for_pods(VICTIM_PODS, lambda ps: all(p.node_name for p in ps), timeout_s=20)
        await s.stop("binder")  # no one answers the eviction to come
        high = gang_yaml("high", pods=1, cpu="4")
        await s.apply_all(high.replace("  workloadRef:", "  priority: 100\n  workloadRef:"))
        await events.wait_for("placement_preempted", workload=PREEMPTOR, timeout_s=20)

        await evicts.first(lambda e: e.evict_requested.attempt == 2, since=0)  # re-sent once
        sent = {e.event_id for e in evicts.seen}
        await s.stop("gangpermit")  # killed: its flights were in memory only
        restarted_at = len(evicts.seen)
        await s.start_gangpermit(**SETTINGS)

        # The restart decides the preemption again: a copy of the first command (attempt 1,
        # its id); in the same pass, the re-send due by then (T + 2 + 4, later if the restart
        # was slow) as the next attempt. Before, the first re-send after the restart came a
        # back-off after it (the one due while it was down taken as sent).
        again = await evicts.first(lambda e: e.evict_requested.attempt == 1, since=restarted_at)
        resent = await evicts.first(lambda e: e.evict_requested.attempt > 1, since=restarted_at)
        assert resent.event_id not in sent
        assert resent.time_unix_nano == again.time_unix_nano  # one pass: at once
        assert resent.evict_requested.attempt >= 3

        counting.append(CountsDeletes(s.backend))
        await s.start_binder(counting[0])
        bound = await events.wait_for("bound", workload=PREEMPTOR, timeout_s=30)

        assert [b.node for b in bound.bound.bindings] == ["n0"]
        assert await s.pods_of(VICTIM_PODS) == []
        assert sorted(counting[0].deletes) == [f"low-{i}" for i in range(4)]  # each once
        # Each command stored is answered (a re-send's answer settles the flight, whichever
        # arrives), none twice; the pods were stopped by the first, and `muster events` says
        # so once: every later answer says it stopped nothing. Before, each said 4 stopped.
        answers = events.matching("eviction_completed", workload=VICTIM)
        answered = [a.cause for a in answers]
        assert len(answered) == len(set(answered)) > 1
        assert set(answered) <= {e.event_id for e in evicts.seen}
        said = sorted(detail(a) for a in answers)
        assert said == ["4 pods stopped"] + ["nothing stopped: 4 pods gone already"] * (
            len(said) - 1
        )
