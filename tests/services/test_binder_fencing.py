"""The binder acts on the present only: commands and decisions of an earlier admission, an
eviction carried out already, or a workload that finished do nothing to the cluster now.

The services run in-process on the test's bus (`placement_stack`); the test publishes what
admission and the preemption service would, with their real payloads, and reads the cluster.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import nats.js.errors
import pytest
from bus_helpers import EventLog
from placement_stack import (
    Stack,
    node,
    placement_stack,
    pod_writes,
    submit_and_admit,
    workload_manifest,
)

from muster.bus import COMMANDS_STREAM, EVENTS_STREAM, Bus, new_event
from muster.cluster.backend import ADMISSION_LABEL
from muster.contracts.v1 import events_pb2 as pb
from muster.preemption.translate import evict_command

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events) as s:
        await s.backend.apply(node("a", cpu="8"))
        yield s


async def publish(stack: Stack, field: str, payload: object, *, workload: str) -> pb.Envelope:
    """Publish as admission would; the envelope comes back with its stream sequence."""
    env = new_event(field, payload, cluster="local", workload=workload, source="admission/0")  # type: ignore[arg-type]
    env.sequence = await stack.bus.publish(env)
    return env


async def admit_again(stack: Stack, key: str, *, count: int) -> pb.Envelope:
    """An `admitted` as admission writes it: with a copy of the manifest submitted."""
    assignment = pb.PodSetAssignment(name="main", count=count, flavors={"cpu": "default"})
    admission = pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    submitted = await stack.events.wait_for("submitted", workload=key)
    payload = pb.WorkloadAdmitted(
        admission=admission,
        manifest_json=submitted.submitted.manifest_json,
        with_reservation=True,  # no admission check, as admission tells it
    )
    return await publish(stack, "admitted", payload, workload=key)


async def settled(bus: Bus, *, timeout_s: float = 10.0) -> None:
    """Every command taken and every binder event handled (acked): what follows is final."""

    async def done() -> bool:
        commands = await bus.js.stream_info(COMMANDS_STREAM)
        try:
            events = await bus.js.consumer_info(EVENTS_STREAM, "binder-local")
        except nats.js.errors.NotFoundError:  # a binder just started has not made it yet
            return False
        return (
            commands.state.messages == 0 and not events.num_ack_pending and not events.num_pending
        )

    async def wait() -> None:
        while True:
            if await done():
                return
            await asyncio.sleep(0.05)  # polling server state; bounded by the timeout

    await asyncio.wait_for(wait(), timeout_s)


async def test_a_late_command_of_a_completed_eviction_leaves_the_next_admission_running(
    stack: Stack,
) -> None:
    key = await submit_and_admit(stack, "victim", count=2, run_seconds=None)
    await stack.events.wait_for("running", workload=key, timeout_s=10)
    evicted = await publish(stack, "evicted", pb.WorkloadEvicted(reason="Preempted"), workload=key)

    # Attempt 1 is held by a binder that dies; attempt 2, re-sent after the grace period,
    # is carried out, the workload requeued and admitted again.
    await stack.bus.publish(evict_command(evicted, attempt=2))
    completed = await stack.events.wait_for("eviction_completed", workload=key, timeout_s=10)
    assert completed.eviction_completed.eviction_id == evicted.event_id
    assert completed.eviction_completed.eviction_sequence == evicted.sequence
    again = await admit_again(stack, key, count=2)
    await stack.wait_for_pods(key, lambda pods: len(pods) == 2 and all(p.node_name for p in pods))

    # Attempt 1 comes back once its ack wait is over.
    await stack.bus.publish(evict_command(evicted, attempt=1))
    await settled(stack.bus)

    pods = await stack.backend.store.list("pod.ns.")
    assert (
        sorted(p.obj["metadata"]["labels"][ADMISSION_LABEL] for p in pods)
        == [str(again.sequence)] * 2
    )
    assert len(stack.events.matching("eviction_completed", workload=key)) == 1


async def test_an_eviction_right_after_an_admission_leaves_no_pod_behind(stack: Stack) -> None:
    # Admitted and evicted within milliseconds: the start (events consumer) and the stop
    # (commands consumer) race. Whatever their order, no pod may be left running.
    keys = []
    for i in range(20):
        key = await submit_and_admit(stack, f"w{i}", count=2, run_seconds=None)
        evicted = await publish(
            stack, "evicted", pb.WorkloadEvicted(reason="Preempted"), workload=key
        )
        await stack.bus.publish(evict_command(evicted, attempt=1))
        keys.append(key)
    for key in keys:
        await stack.events.wait_for("eviction_completed", workload=key, timeout_s=10)
    await settled(stack.bus)
    left = {key: await stack.pods_of(key) for key in keys}
    assert {key: pods for key, pods in left.items() if pods} == {}


async def test_an_admission_redelivered_after_its_workload_finished_starts_nothing(
    stack: Stack, bus: Bus
) -> None:
    keys = []
    for i in range(3):
        manifest = workload_manifest(f"short{i}", count=1, run_seconds="1")
        key = f"ns/short{i}"
        submitted = pb.WorkloadSubmitted(manifest_json=json.dumps(manifest), queue_name="main")
        await publish(stack, "submitted", submitted, workload=key)
        admitted = await admit_again(stack, key, count=1)  # as admission: with the manifest
        assert admitted.admitted.manifest_json
        keys.append(key)
    for key in keys:
        await stack.events.wait_for("finished", workload=key, timeout_s=15)
        for pod in await stack.pods_of(key):  # the Job's pods are cleaned up, as a TTL would
            await stack.backend.delete("Pod", pod.name, namespace=pod.namespace)

    # The binder restarts with its consumer lost: every admission in the stream comes again.
    await stack.stop("binder")
    await bus.js.delete_consumer(EVENTS_STREAM, "binder-local")
    await stack.start_binder()
    await settled(bus)
    assert [key for key in keys if await stack.pods_of(key)] == []


async def test_a_permit_binds_only_the_pods_it_names_by_uid(bus: Bus, events: EventLog) -> None:
    async with placement_stack(bus, events, placed_first=False) as stack:  # created unbound
        await stack.backend.apply(node("a", cpu="8"))
        await _old_permit_binds_no_new_pod(stack)


async def test_a_permit_to_create_of_an_earlier_admission_creates_nothing(stack: Stack) -> None:
    """Pods created on their nodes: the old permit, redelivered after the workload was evicted
    and admitted again, names its own admission, and the name's pod is not made for it."""
    key = await submit_and_admit(stack, "gang", count=1, run_seconds=None)
    permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
    assert permitted.gang_permitted.create
    await stack.events.wait_for("running", workload=key, timeout_s=10)
    evicted = await publish(stack, "evicted", pb.WorkloadEvicted(reason="Preempted"), workload=key)
    await stack.bus.publish(evict_command(evicted, attempt=1))
    await stack.events.wait_for("eviction_completed", workload=key, timeout_s=10)
    await stack.stop("gangpermit")  # the new admission is not placed: only the old permit is
    await admit_again(stack, key, count=1)

    stale = pb.GangPermitted()
    stale.CopyFrom(permitted.gang_permitted)
    async with pod_writes(stack) as writes:
        await publish(stack, "gang_permitted", stale, workload=key)
        await settled(stack.bus)
    assert writes == []  # not even created and taken out again
    assert len(stack.events.matching("bound", workload=key)) == 1  # the first admission's


async def _old_permit_binds_no_new_pod(stack: Stack) -> None:
    key = await submit_and_admit(stack, "gang", count=1, run_seconds=None)
    permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
    await stack.events.wait_for("running", workload=key, timeout_s=10)
    evicted = await publish(stack, "evicted", pb.WorkloadEvicted(reason="Preempted"), workload=key)
    await stack.bus.publish(evict_command(evicted, attempt=1))
    await stack.events.wait_for("eviction_completed", workload=key, timeout_s=10)
    await stack.stop("gangpermit")  # the new pod stays pending: only the old permit is around
    await admit_again(stack, key, count=1)
    await stack.wait_for_pods(key, lambda pods: len(pods) == 1)

    # The old permit, redelivered (a new copy: stored after the eviction), names the old uid.
    stale = pb.GangPermitted()
    stale.CopyFrom(permitted.gang_permitted)
    await publish(stack, "gang_permitted", stale, workload=key)
    rejected = await stack.events.wait_for("gang_rejected", workload=key, timeout_s=10)
    assert "Precondition failed: UID" in rejected.gang_rejected.message
    (pod,) = await stack.pods_of(key)
    assert pod.node_name == ""
