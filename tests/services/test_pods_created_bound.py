"""Pods placed before they exist (issue 19): gang-permit places a Kueue workload's gang from its
`submitted` and `admitted`, and the binder creates each pod on its node, against a real
nats-server and the sim cluster: one write per pod where there were two, restarts of either
service between the placement and the creation, and an eviction stored before the creation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from bus_helpers import EventLog
from placement_stack import Stack, node, placement_stack, pod_writes, submit_and_admit

from muster.api.model import Workload
from muster.binder.translate import pod_set_starts
from muster.bus import EVENTS_STREAM, Bus
from muster.cluster.backend import ClusterChange
from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import events_pb2
from muster.payloads import written_workload

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events) as s:
        yield s


def node_of(change: ClusterChange) -> str:
    return str(change.obj.get("spec", {}).get("nodeName") or "")


async def test_an_admitted_workloads_pods_are_created_on_their_nodes_never_unbound(
    stack: Stack,
) -> None:
    await stack.backend.apply(node("a"))
    await stack.backend.apply(node("b"))
    async with pod_writes(stack) as writes:
        key = await submit_and_admit(stack, "train", count=3)
        permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
        await stack.events.wait_for("finished", workload=key, timeout_s=20)
        await stack.wait_for_pods(key, lambda pods: all(p.phase == "Succeeded" for p in pods))
    placed = {b.pod.name: b.node for b in permitted.gang_permitted.bindings}
    assert permitted.gang_permitted.create
    assert permitted.gang_permitted.admission_sequence > 0
    first: dict[str, ClusterChange] = {}
    for change in writes:
        first.setdefault(change.obj["metadata"]["name"], change)
    assert {name: node_of(change) for name, change in first.items()} == placed  # born bound
    # Created bound, Running, Succeeded: no write only to bind (it was created, bound).
    by_pod = {name: [c for c in writes if c.obj["metadata"]["name"] == name] for name in placed}
    assert {name: len(changes) for name, changes in by_pod.items()} == dict.fromkeys(placed, 3)
    bound = stack.events.matching("bound", workload=key)
    assert [b.cause for b in bound] == [permitted.event_id]


async def test_binder_and_gangpermit_killed_between_placement_and_creation_make_each_pod_once(
    stack: Stack,
) -> None:
    """The permit is stored; gang-permit dies, the binder dies after creating one pod. Both
    come back: the rest are created on their placed nodes, nothing is placed again."""
    await stack.backend.apply(node("a", cpu="4"))
    await stack.backend.apply(node("b", cpu="4"))
    await stack.stop("binder")
    async with pod_writes(stack) as writes:
        key = await submit_and_admit(stack, "train", count=3, run_seconds="60")
        permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
        await stack.stop("gangpermit")
        placed = {b.pod.name: b.node for b in permitted.gang_permitted.bindings}
        one = sorted(placed)[0]
        await created_by_a_binder_that_died(stack, key, permitted, only=one)
        await stack.start_gangpermit()
        await stack.start_binder()
        await stack.events.wait_for("bound", workload=key, timeout_s=10)
        await stack.wait_for_pods(
            key, lambda pods: len(pods) == 3 and all(p.node_name for p in pods)
        )
        await stack.events.wait_for("running", workload=key, timeout_s=10)
    assert {p.name: p.node_name for p in await stack.pods_of(key)} == placed
    creations = [c for c in writes if c.type == "ADDED"]
    assert sorted(c.obj["metadata"]["name"] for c in creations) == sorted(placed)  # once each
    assert all(node_of(c) == placed[c.obj["metadata"]["name"]] for c in creations)
    assert len(stack.events.matching("gang_permitted", workload=key)) == 1


async def created_by_a_binder_that_died(
    stack: Stack, key: str, permitted: events_pb2.Envelope, *, only: str
) -> None:
    """What a binder that died mid-way leaves: pod `only` of the permit created on its node."""
    wl = workload_of(stack, key)
    binding = next(b for b in permitted.gang_permitted.bindings if b.pod.name == only)
    admission = permitted.gang_permitted.admission_sequence
    [admitted] = stack.events.matching("admitted", workload=key)
    starts = pod_set_starts(wl, admitted.admitted)
    await stack.backend.start_workload(
        key, pod_sets=starts, admission=admission, nodes={only: binding.node}
    )


def workload_of(stack: Stack, key: str) -> Workload:
    [submitted] = stack.events.matching("submitted", workload=key)
    return written_workload(submitted.submitted.manifest_json, what=key)


async def test_an_eviction_stored_before_the_pods_are_created_keeps_them_from_being_made(
    stack: Stack,
) -> None:
    """Admission evicts while gang-permit's permit is on its way (stored after the eviction,
    before gang-permit read it): the binder creates none of the evicted admission's pods."""
    await stack.backend.apply(node("a", cpu="4"))
    await stack.stop("binder")
    await stack.stop("gangpermit")
    key = await submit_and_admit(stack, "victim", count=2, run_seconds="60")
    admitted = await stack.events.wait_for("admitted", workload=key)
    evicted = events_pb2.WorkloadEvicted(reason="Preempted", message="by ns/other")
    await stack.publish("evicted", evicted, workload=key)
    await stack.start_gangpermit()  # it reads the eviction's end only at eviction_completed
    permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
    assert permitted.gang_permitted.admission_sequence == admitted.sequence

    async with pod_writes(stack) as writes:
        await stack.start_binder()
        await handled_everything(stack.bus, "binder-local")
    assert writes == []  # not even created and taken out again
    assert await stack.pods_of(key) == []
    assert stack.events.matching("bound", workload=key) == []


async def handled_everything(bus: Bus, durable: str, *, timeout_s: float = 10.0) -> None:
    """Until consumer `durable` has acknowledged every message it was given (a consumer that
    skips one publishes nothing to wait for)."""
    deadline = time.monotonic() + timeout_s
    while not await bus.drained(durable):
        assert time.monotonic() < deadline, f"{durable} did not handle its messages"
        await asyncio.sleep(0.05)


async def test_a_workload_whose_admission_carries_no_manifest_is_created_unbound_and_bound(
    stack: Stack,
) -> None:
    """Over 256 KiB its `admitted` carries no copy of the manifest, and its `submitted` left the
    stream before gang-permit replayed it (the binder kept it): gang-permit cannot build its
    pods, so neither places first. The binder creates them unbound, gang-permit binds them."""
    await stack.backend.apply(node("a", cpu="4"))
    await stack.stop("gangpermit")
    key = await submit_and_admit(stack, "big", count=2, copied=False)
    [submitted] = stack.events.matching("submitted", workload=key)
    await stack.bus.js.delete_msg(EVENTS_STREAM, submitted.sequence)  # aged out of the stream
    await stack.start_gangpermit()
    permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
    await stack.events.wait_for("bound", workload=key, timeout_s=10)
    await stack.events.wait_for("finished", workload=key, timeout_s=20)
    assert not permitted.gang_permitted.create
    assert len(permitted.gang_permitted.bindings) == 2


# --- a rolling upgrade: one of the two from before pods were created on their nodes ---------


def not_placing_first(backend: SimBackend) -> SimBackend:
    """The cluster as a binder or gang-permit from before sees it: pods created unbound."""
    return SimBackend(backend.store, placed_first=False)


async def test_gangpermit_placing_first_with_a_binder_that_creates_unbound_makes_each_pod_once(
    bus: Bus, events: EventLog
) -> None:
    """gang-permit upgraded first: the binder (from before) creates the pods unbound at
    `admitted`, gang-permit has placed them before it saw them; each is made once and bound
    on its placed node, the permit answered once."""
    async with placement_stack(bus, events, binder_backend=not_placing_first) as stack:
        await stack.backend.apply(node("a"))
        await stack.backend.apply(node("b"))
        async with pod_writes(stack) as writes:
            key = await submit_and_admit(stack, "train", count=3)
            permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
            await stack.events.wait_for("finished", workload=key, timeout_s=20)
        placed = {b.pod.name: b.node for b in permitted.gang_permitted.bindings}
        assert {p.name: p.node_name for p in await stack.pods_of(key)} == placed
    creations = [c for c in writes if c.type == "ADDED"]
    assert sorted(c.obj["metadata"]["name"] for c in creations) == sorted(placed)  # once each
    assert len(events.matching("gang_permitted", workload=key)) == 1
    assert [b.cause for b in events.matching("bound", workload=key)] == [permitted.event_id]


async def test_a_binder_that_waits_for_a_permit_beside_an_old_gangpermit_waits_for_its_upgrade(
    bus: Bus, events: EventLog
) -> None:
    """The binder upgraded first: it creates nothing at `admitted`, and gang-permit from before
    waits for pods: nothing is made (nor made twice) until gang-permit is upgraded, which
    places the admitted gang from the stream and the binder creates its pods on their nodes."""
    async with placement_stack(bus, events) as stack:
        await stack.stop("gangpermit")
        stack.gangpermit_backend = not_placing_first(stack.backend)
        await stack.start_gangpermit()
        await stack.backend.apply(node("a"))
        key = await submit_and_admit(stack, "train", count=2)
        await stack.events.wait_for("admitted", workload=key)
        await handled_everything(stack.bus, "binder-local")
        assert await stack.pods_of(key) == []
        assert stack.events.matching("gang_permitted", workload=key) == []

        await stack.stop("gangpermit")
        stack.gangpermit_backend = None
        await stack.start_gangpermit()  # upgraded: it replays the admission
        permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
        assert permitted.gang_permitted.create
        await stack.events.wait_for("finished", workload=key, timeout_s=20)
        assert len(await stack.pods_of(key)) == 2
