"""A late eviction (decided before its workload was deleted, stored after the name was submitted
again) is settled by the binder's drop: the preemption service neither re-sends it nor
dead-letters it, and logs no error (docs/events.md, "A name used again").

The binder, watcher and gang-permit run in-process on the test's bus (`placement_stack`) with
the real preemption service; the test publishes what the gateway and admission would.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from admission_world import start_preemption
from bus_helpers import EventLog
from placement_stack import Stack, node, placement_stack, submit_and_admit

from muster.bus import DLQ_STREAM, Bus, BusConfig, dlq_subject, new_event
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)

GRACE_S = 1.0  # long beside a binder's answer, so a second attempt would mean no settling


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events) as s:
        await s.backend.apply(node("a", cpu="8"))
        yield s


def eviction(key: str, *, cluster: str = "local", submitted_id: str = "") -> pb.Envelope:
    payload = pb.WorkloadEvicted(reason="Preempted", message="to make room", preemptor="ns/p")
    env = new_event("evicted", payload, cluster=cluster, workload=key, source="admission/0")
    env.submitted_id = submitted_id
    return env


async def test_a_dropped_late_eviction_is_settled_without_retries_or_dead_letters(
    stack: Stack, bus_config: BusConfig, caplog: pytest.LogCaptureFixture
) -> None:
    key = await submit_and_admit(stack, "w", count=1, run_seconds=None)
    first = await stack.events.wait_for("submitted", workload=key)
    await stack.events.wait_for("running", workload=key)
    (pod,) = await stack.pods_of(key)
    deleted = await stack.publish("deleted", pb.WorkloadDeleted(), workload=key)
    await stack.backend.delete("Pod", pod.name, namespace=pod.namespace)  # as Kubernetes would
    await stack.wait_for_pods(key, lambda pods: not pods)
    await submit_and_admit(stack, "w", count=1, run_seconds=None)
    await stack.events.wait_for_next("running", after=deleted, timeout_s=10)
    (pod,) = await stack.pods_of(key)

    preemption = await start_preemption(bus_config, resend_s=GRACE_S, max_attempts=2)
    try:
        await preemption.wait_serving()
        late = eviction(key, submitted_id=first.event_id)
        await stack.bus.publish(late)
        dropped = await stack.events.wait_for("eviction_dropped", workload=key, timeout_s=10)
        assert dropped.eviction_dropped.eviction_id == late.event_id
        assert dropped.submitted_id == first.event_id

        # A marker on a cluster without a binder is given up after two grace periods: by then
        # the late eviction, had it stayed in flight, would have been re-sent and given up.
        marker = eviction("ns/marker", cluster="east")
        await stack.bus.publish(marker)
        copies = await stack.bus.js.pull_subscribe(dlq_subject("preemption"), stream=DLQ_STREAM)
        (msg,) = await copies.fetch(1, timeout=10)
        assert pb.Envelope.FromString(msg.data).workload == "ns/marker"
    finally:
        await preemption.stop()

    assert len(stack.events.matching("eviction_dropped", workload=key)) == 1  # one attempt
    assert (await stack.bus.js.stream_info(DLQ_STREAM)).state.messages == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and key in r.getMessage()]
    assert errors == []
    assert await stack.pods_of(key) == [pod]  # the new workload's pod was never stopped
