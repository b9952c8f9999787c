"""A gang outside Kueue preempts a lower-priority gang, and the binder's `cmd.evict` fails for
good (the cluster refuses the first delete: dead-lettered). Gang-permit sends it again when its
back-off ends, and the preemptor is bound on the room the victims leave (on a real nats-server,
the pod-path services in-process). Before, nothing sent it again: the preemptor timed out
waiting for victims that never stopped, and waited for ever.
"""

from __future__ import annotations

import pytest
from bus_helpers import EventLog
from placement_stack import preemption_stack

from muster.bus import Bus
from muster.cluster.errors import ClusterError
from muster.cluster.sim.backend import SimBackend

pytestmark = pytest.mark.timeout(60)

VICTIM, VICTIM_PODS, PREEMPTOR = "ns/low", "ns/low/workers", "ns/high/workers"
DEADLINE_S = 1.0  # the preemptor times out before the re-send: it waits for its victims
RESEND_S = 2.0


class RefusesFirstDelete(SimBackend):
    """The sim cluster as the binder reaches it: the first delete is refused for good (as an
    API server answering 403 would), so the binder dead-letters that command."""

    def __init__(self, backend: SimBackend) -> None:
        super().__init__(backend.store)
        self.deletes: list[str] = []

    async def delete(self, kind: str, name: str, *, namespace: str = "", uid: str = "") -> bool:
        self.deletes.append(name)
        if len(self.deletes) == 1:
            raise ClusterError(f"{kind}/{namespace}/{name}", "Forbidden", "not now")
        return await super().delete(kind, name, namespace=namespace, uid=uid)


async def test_a_dead_lettered_evict_is_sent_again_and_the_preemptor_bound(
    bus: Bus, events: EventLog
) -> None:
    refusing: list[RefusesFirstDelete] = []

    def refuses_first_delete(backend: SimBackend) -> RefusesFirstDelete:
        refusing.append(RefusesFirstDelete(backend))
        return refusing[0]

    config = {"gang_timeout_s": DEADLINE_S, "evict_resend_s": RESEND_S}
    stack = preemption_stack(bus, events, binder_backend=refuses_first_delete, gangpermit=config)
    async with stack as s:
        await events.wait_for("placement_preempted", workload=PREEMPTOR, timeout_s=20)
        rejected = await events.wait_for("gang_rejected", workload=PREEMPTOR, timeout_s=20)
        assert rejected.gang_rejected.reason == "GangTimedOut"
        # The command was dead-lettered after stopping some of the pods, or none.
        left = len(await s.pods_of(VICTIM_PODS))
        assert left > 0

        bound = await events.wait_for("bound", workload=PREEMPTOR, timeout_s=20)

        assert [b.node for b in bound.bound.bindings] == ["n0"]
        assert await s.pods_of(VICTIM_PODS) == []
        (answer,) = events.matching("eviction_completed", workload=VICTIM)
        assert answer.eviction_completed.pods == left  # the re-send's: the first had none
