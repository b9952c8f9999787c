"""`bound` only for binds (docs/events.md, issue 19): a binder with `--bound-events binds`
stores no `bound` for a whole permit whose pods it creates on their nodes; against a real
nats-server and the sim cluster, a workload still runs and finishes, and a binder and gang-permit
that die after the pods were made (before the binder acknowledged the permit) make no pod twice,
place nothing again, and hold no room for the permit once they are back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from bus_helpers import EventLog
from placement_stack import Stack, node, placement_stack, pod_writes, submit_and_admit
from test_pods_created_bound import created_by_a_binder_that_died, node_of

from muster.bus import Bus

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events) as s:
        await s.stop("binder")
        await s.start_binder(bound_for_created=False)  # --bound-events binds
        yield s


async def test_a_workload_runs_and_finishes_with_no_bound_stored(stack: Stack) -> None:
    await stack.backend.apply(node("a"))
    await stack.backend.apply(node("b"))
    key = await submit_and_admit(stack, "train", count=3)
    permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
    await stack.events.wait_for("finished", workload=key, timeout_s=20)

    placed = {b.pod.name: b.node for b in permitted.gang_permitted.bindings}
    assert permitted.gang_permitted.create
    assert {p.name: p.node_name for p in await stack.pods_of(key)} == placed
    assert stack.events.matching("bound", workload=key) == []
    assert [e.type for e in stack.events.seen if e.workload == key] == [
        "workload.submitted",
        "workload.admitted",
        "workload.gang_permitted",
        "workload.running",
        "workload.finished",
    ]


async def test_binder_and_gangpermit_killed_after_the_pods_were_made_make_none_twice(
    stack: Stack,
) -> None:
    """The binder dies once every pod is made, before it acknowledged the permit (its one
    write done, nothing told); gang-permit dies after its permit. Back, the binder handles the
    permit again and makes nothing; gang-permit, with no `bound` to replay, takes the pods on
    their nodes as its permit's answer: the room is free for the next gang once it finishes."""
    await stack.backend.apply(node("a", cpu="4"))
    await stack.backend.apply(node("b", cpu="4"))
    await stack.stop("binder")
    async with pod_writes(stack) as writes:
        key = await submit_and_admit(stack, "train", count=4, run_seconds="2")
        permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
        await stack.stop("gangpermit")
        placed = {b.pod.name: b.node for b in permitted.gang_permitted.bindings}
        for pod in sorted(placed):
            await created_by_a_binder_that_died(stack, key, permitted, only=pod)
        await stack.start_gangpermit()
        await stack.start_binder(bound_for_created=False)
        await stack.events.wait_for("running", workload=key, timeout_s=10)
        await stack.events.wait_for("finished", workload=key, timeout_s=20)
    creations = [c for c in writes if c.type == "ADDED"]
    assert sorted(c.obj["metadata"]["name"] for c in creations) == sorted(placed)  # once each
    assert all(node_of(c) == placed[c.obj["metadata"]["name"]] for c in creations)
    assert len(stack.events.matching("gang_permitted", workload=key)) == 1
    assert stack.events.matching("bound", workload=key) == []

    # Every cpu of both nodes: placed only if the restored permit holds nothing any more.
    after = await submit_and_admit(stack, "next", count=4)
    await stack.events.wait_for("running", workload=after, timeout_s=10)


async def test_a_permit_whose_pods_were_deleted_while_gangpermit_was_down_holds_nothing(
    stack: Stack,
) -> None:
    """The pods the binder made for a permit were all deleted outside muster while gang-permit
    was down. Back, it reads that the binder acknowledged the permit (its consumer's ack floor,
    docs/events.md, "Launchers store `bound` only for binds"), so the pods it does not find are
    gone, not still to be made: the next gang takes their room at once, and nothing of the
    first is placed or made again."""
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
        await stack.events.wait_for("running", workload=after, timeout_s=10)
    made = [c.obj["metadata"]["name"] for c in writes if c.type == "ADDED"]
    assert sorted(n for n in made if n.startswith("train-")) == [
        f"train-main-{i}" for i in range(4)
    ]
    assert len(stack.events.matching("gang_permitted", workload=key)) == 1
    assert stack.events.matching("bound", workload=key) == []


async def test_a_permit_the_binder_has_not_handled_yet_holds_its_nodes_across_a_restart(
    stack: Stack,
) -> None:
    """The other side: gang-permit restarts after its permit and before the binder made the
    pods (the binder is down). Its pods are not in the cluster, as if deleted, but the binder has
    not acknowledged the permit: their nodes stay held (the next gang waits), and once the
    binder is back it makes each pod once, where it was placed."""
    await stack.backend.apply(node("a", cpu="4"))
    await stack.backend.apply(node("b", cpu="4"))
    await stack.stop("binder")
    async with pod_writes(stack) as writes:
        key = await submit_and_admit(stack, "train", count=4, run_seconds="600")  # every cpu
        permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
        await stack.stop("gangpermit")
        await stack.start_gangpermit()

        after = await submit_and_admit(stack, "next", count=4)
        await stack.events.wait_for("gang_waiting", workload=after, timeout_s=10)  # room held
        await stack.start_binder(bound_for_created=False)
        await stack.events.wait_for("running", workload=key, timeout_s=10)
    placed = {b.pod.name: b.node for b in permitted.gang_permitted.bindings}
    creations = [c for c in writes if c.type == "ADDED"]
    assert sorted(c.obj["metadata"]["name"] for c in creations) == sorted(placed)  # once each
    assert all(node_of(c) == placed[c.obj["metadata"]["name"]] for c in creations)
    assert len(stack.events.matching("gang_permitted", workload=key)) == 1
    assert stack.events.matching("gang_permitted", workload=after) == []
