"""The edge `bound` only for binds leaves (docs/events.md, "Launchers store `bound` only for
binds"), on a real nats-server: the binder, at `--bound-events binds` as the launchers start it,
made a gang's pods on their nodes and told no `bound`; they were all deleted outside muster while
gang-permit was down. Back, gang-permit holds the permit's nodes (it cannot tell its pods from
pods not made yet) until the workload ends, and no longer: then the next gang takes the room,
and nothing of the first is placed or made again."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from bus_helpers import EventLog
from placement_stack import Stack, node, placement_stack, pod_writes, submit_and_admit

from muster.bus import Bus
from muster.contracts.v1 import events_pb2

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events) as s:
        await s.stop("binder")
        await s.start_binder(bound_for_created=False)  # --bound-events binds
        yield s


async def test_a_permit_whose_pods_were_deleted_while_gangpermit_was_down_holds_until_its_end(
    stack: Stack,
) -> None:
    await stack.backend.apply(node("a", cpu="4"))
    await stack.backend.apply(node("b", cpu="4"))
    async with pod_writes(stack) as writes:
        key = await submit_and_admit(stack, "train", count=4, run_seconds="600")  # every cpu
        await stack.events.wait_for("running", workload=key, timeout_s=10)
        await stack.stop("gangpermit")
        for pod in await stack.pods_of(key):  # `kubectl delete pod`, outside muster
            await stack.backend.delete("Pod", pod.name, namespace=pod.namespace)
        await stack.wait_for_pods(key, lambda pods: not pods)
        await stack.start_gangpermit()

        after = await submit_and_admit(stack, "next", count=4)
        await stack.events.wait_for("gang_waiting", workload=after, timeout_s=10)  # room held
        assert stack.events.matching("gang_permitted", workload=after) == []

        await stack.publish("deleted", events_pb2.WorkloadDeleted(), workload=key)
        await stack.events.wait_for("running", workload=after, timeout_s=10)
    made = [c.obj["metadata"]["name"] for c in writes if c.type == "ADDED"]
    assert sorted(n for n in made if n.startswith("train-")) == [
        f"train-main-{i}" for i in range(4)
    ]
    assert len(stack.events.matching("gang_permitted", workload=key)) == 1
    assert stack.events.matching("bound", workload=key) == []
