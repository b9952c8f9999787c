"""Poison never stops a service: objects and events it cannot handle are dead-lettered with
their reason, and everything else goes on, also after a restart on the same data."""

from __future__ import annotations

import json
from typing import Any

import nats.js.errors
import pytest
from admission_world import (
    basic_config,
    config_applied,
    eventually,
    local_queue,
    publish,
    start_admission,
    submitted,
    workload,
)
from bus_helpers import EventLog
from placement_stack import Stack, node, placement_stack, submit_and_admit, workload_manifest

from muster.bus import DLQ_STREAM, Bus, new_event
from muster.cluster.sim import pod_key
from muster.contracts.v1 import events_pb2 as pb

pytestmark = pytest.mark.timeout(60)


def huge_pod(name: str = "huge") -> dict[str, Any]:
    """A Pod naming muster as its scheduler and asking for 1e30 cpu (issue 12)."""
    container = {"name": "c", "resources": {"requests": {"cpu": "1e30"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"schedulerName": "muster", "containers": [container]},
    }


async def dead_letters(bus: Bus) -> list[Any]:
    try:
        count = (await bus.js.stream_info(DLQ_STREAM)).state.messages
    except nats.js.errors.NotFoundError:
        return []
    return [await bus.js.get_msg(DLQ_STREAM, seq) for seq in range(1, count + 1)]


async def test_a_pod_asking_for_1e30_cpu_is_dead_lettered_and_gangs_still_run(
    bus: Bus, events: EventLog
) -> None:
    async with placement_stack(bus, events) as stack:
        await stack.backend.apply(node("a"))
        await stack.backend.store.create(pod_key("ns", "huge"), huge_pod())  # stored long ago
        key = await submit_and_admit(stack, "after", count=1)
        await stack.events.wait_for("finished", workload=key, timeout_s=15)

        # Restarted on the same cluster, it reads the pod again and still goes on.
        await stack.stop("gangpermit")
        await stack.start_gangpermit()
        key = await submit_and_admit(stack, "after-restart", count=1)
        await stack.events.wait_for("finished", workload=key, timeout_s=15)
        assert_alive(stack)
    letters = [m for m in await dead_letters(bus) if m.subject.endswith("-cluster")]
    assert letters, "the pod was not dead-lettered"
    headers = letters[0].headers or {}
    assert letters[0].subject == "muster.v1.dlq.gangpermit-local-cluster"
    assert headers["Muster-Dlq-Subject"] == "pod.ns.huge"
    assert "spec.containers[0].resources.requests.cpu" in headers["Muster-Dlq-Reason"]
    assert json.loads(letters[0].data)["metadata"]["name"] == "huge"


def assert_alive(stack: Stack) -> None:
    for name, task in stack.tasks.items():
        assert not task.done(), f"{name} stopped: {task.exception()}"


async def test_a_local_queue_named_dot_dot_slash_x_does_not_stop_queue_visibility(
    bus: Bus, events: EventLog
) -> None:
    # Stored before names were validated: admission reads it from the stream at start.
    await publish(bus, config_applied(local_queue("../x")))
    await basic_config(bus, cpu="4")
    admission = await start_admission(bus.config)
    try:
        await admission.wait_serving()
        await publish(bus, submitted(workload("a", cpu="3")))
        await events.wait_for("admitted", workload="ns/a")
        status = await events.wait_for("queue_status", timeout_s=10)
        kv = await bus.kv("MUSTER_VISIBILITY")

        async def written() -> bool:
            entry = await kv.get("cq.cq")
            if entry is None:
                return False
            return pb.ClusterQueueStatus.FromString(entry.value or b"").admitted_workloads == 1

        await eventually(written, timeout_s=5)
        lq = await kv.get("lq.ns.lq")
        assert lq is not None
        assert lq.value
        assert not admission.task.done()
    finally:
        await admission.stop()
    assert status.queue_status.cluster_queue.name == "cq"


async def test_an_event_gangpermit_cannot_apply_is_dead_lettered(
    bus: Bus, events: EventLog
) -> None:
    async with placement_stack(bus, events) as stack:
        await stack.backend.apply(node("a"))
        broken = pb.ConfigApplied(kind="PriorityClass", name="high", manifest_json="{")
        env = new_event("config_applied", broken, cluster="local", source="test")
        await bus.publish(env)
        key = await submit_and_admit(stack, "after", count=1)
        await stack.events.wait_for("finished", workload=key, timeout_s=15)
        assert_alive(stack)
    (letter,) = [m for m in await dead_letters(bus) if m.subject.endswith("gangpermit-local")]
    assert pb.Envelope.FromString(letter.data).event_id == env.event_id
    assert "JSONDecodeError" in (letter.headers or {})["Muster-Dlq-Reason"]


async def test_an_admission_of_2_to_the_31_pods_is_dead_lettered_not_made(
    bus: Bus, events: EventLog
) -> None:
    # As a client holding admission's NATS permissions could publish it: the binder made the
    # pods one by one and gang-permit listed them, until memory ran out and the consumer died.
    async with placement_stack(bus, events) as stack:
        await stack.backend.apply(node("a"))
        manifest = workload_manifest("greedy", count=1)
        spec = pb.WorkloadSubmitted(manifest_json=json.dumps(manifest), queue_name="main")
        await stack.publish("submitted", spec, workload="ns/greedy")
        assignment = pb.PodSetAssignment(name="main", count=2**31 - 1, flavors={"cpu": "default"})
        admission = pb.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
        await stack.publish(
            "admitted", pb.WorkloadAdmitted(admission=admission), workload="ns/greedy"
        )

        key = await submit_and_admit(stack, "after", count=1)
        await stack.events.wait_for("finished", workload=key, timeout_s=15)
        assert_alive(stack)

        async def both() -> bool:
            return len(await _letters_about(bus, "ns/greedy")) == 2

        await eventually(both)
        assert await stack.backend.store.list("pod.ns.greedy") == []
    letters = await _letters_about(bus, "ns/greedy")
    assert sorted(m.subject for m in letters) == [
        "muster.v1.dlq.binder-local",
        "muster.v1.dlq.gangpermit-local",
    ]
    for letter in letters:
        assert (letter.headers or {})["Muster-Dlq-Reason"].endswith(
            "admission of ns/greedy: podset 'main' admitted with 2147483647 pods, outside 0..1"
            " (its count)"
        )


async def _letters_about(bus: Bus, key: str) -> list[Any]:
    return [m for m in await dead_letters(bus) if pb.Envelope.FromString(m.data).workload == key]


async def test_a_pod_the_watcher_cannot_read_is_dead_lettered_and_the_watch_goes_on(
    bus: Bus, events: EventLog
) -> None:
    odd = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "odd", "namespace": "ns", "labels": ["not", "a", "map"]},
        "spec": {"schedulerName": "muster", "containers": []},
    }
    await stored_long_ago_then_a_workload_runs(bus, events, odd)
    (letter,) = [m for m in await dead_letters(bus) if m.subject.endswith("watcher-local")]
    assert (letter.headers or {})["Muster-Dlq-Subject"] == "pod.ns.odd"
    assert "AttributeError" in (letter.headers or {})["Muster-Dlq-Reason"]


async def test_a_stored_pod_the_kubelet_cannot_read_does_not_stop_the_others(
    bus: Bus, events: EventLog
) -> None:
    broken = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "broken", "namespace": "ns"},
        "spec": {"nodeName": "a", "containers": []},
        "status": "Running",  # not an object: what no reader expects
    }
    await stored_long_ago_then_a_workload_runs(bus, events, broken)


async def stored_long_ago_then_a_workload_runs(
    bus: Bus, events: EventLog, pod: dict[str, Any]
) -> None:
    """Put `pod` straight into the store (as written before anything checked it), then run a
    workload through every per-cluster service: it finishes, and every service still runs."""
    async with placement_stack(bus, events) as stack:
        await stack.backend.apply(node("a"))
        meta = pod["metadata"]
        await stack.backend.store.create(pod_key(meta["namespace"], meta["name"]), pod)
        key = await submit_and_admit(stack, "after", count=1)
        await stack.events.wait_for("finished", workload=key, timeout_s=15)
        assert_alive(stack)


async def test_an_event_jetstream_refuses_for_good_is_kept_in_the_dead_letter_stream(
    bus: Bus,
) -> None:
    """What admission does with a decision JetStream will never store (over the size limit)."""
    env = new_event("finished", pb.WorkloadFinished(message="x" * 100), cluster="local",
                    workload="ns/w", source="test")  # fmt: skip
    reason = "JetStream refused this decision: too large"
    await bus.dead_letter_unstored(env, consumer="admission-0", reason=reason)
    await bus.dead_letter_unstored(env, consumer="admission-0", reason=reason)  # a retry
    (letter,) = await dead_letters(bus)
    assert letter.subject == "muster.v1.dlq.admission-0"
    assert pb.Envelope.FromString(letter.data).event_id == env.event_id
    headers = letter.headers or {}
    assert headers["Muster-Dlq-Reason"] == reason
    assert headers["Muster-Dlq-Subject"] == "muster.v1.local.workload.finished"
