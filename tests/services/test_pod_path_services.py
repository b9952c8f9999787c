"""watcher, gangpermit and binder against a real nats-server and the sim cluster with its kubelet.

Each test starts the three services in-process on the test's bus, drives them with the events
admission would publish, and waits for the events they publish on their NATS subjects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest
from bus_helpers import EventLog

from muster.binder.service import BinderConfig, run_binder
from muster.bus import Bus, new_event
from muster.cluster.backend import PodSetStart
from muster.cluster.objects import PodView
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.clock import WallClock
from muster.cluster.sim.kubelet import Kubelet
from muster.cluster.sim.store import SimStore
from muster.contracts.v1 import events_pb2
from muster.gangpermit.service import GangPermitConfig, run_gangpermit
from muster.watcher.service import WatcherConfig, run_watcher

pytestmark = pytest.mark.timeout(60)

CLUSTER = "local"
SPEED = 20.0  # pods run 20 times faster than their muster.dev/run-seconds


class Ready:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def ready(self) -> None:
        self.event.set()


class CountingClock:
    """time.time_ns that counts its calls: gangpermit reads it once per pass over gangs."""

    def __init__(self) -> None:
        self.calls = 0
        self.changed = asyncio.Event()

    def __call__(self) -> int:
        self.calls += 1
        self.changed.set()
        return time.time_ns()

    async def wait_for_calls(self, n: int, *, timeout_s: float = 10.0) -> None:
        async def reached() -> None:
            while self.calls < n:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(reached(), timeout_s)


@dataclass
class Stack:
    bus: Bus
    backend: SimBackend
    events: EventLog
    tasks: dict[str, asyncio.Task[None]]
    gang_clock: CountingClock

    async def start(self, name: str, body: Coroutine[Any, Any, None], ready: Ready) -> None:
        task = asyncio.create_task(body, name=name)
        self.tasks[name] = task
        waiter = asyncio.create_task(ready.event.wait())
        await asyncio.wait({task, waiter}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()  # it died: show why
        assert ready.event.is_set(), f"{name} did not become ready"

    async def start_watcher(self) -> None:
        ready = Ready()
        body = run_watcher(
            self.bus, ready, backend=self.backend, config=WatcherConfig(cluster=CLUSTER)
        )
        await self.start("watcher", body, ready)

    async def stop(self, name: str) -> None:
        task = self.tasks.pop(name)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def publish(self, field: str, payload: Any, *, workload: str) -> events_pb2.Envelope:
        env = new_event(field, payload, cluster=CLUSTER, workload=workload, source="test")
        await self.bus.publish(env)
        return env

    async def pods_of(self, workload: str) -> list[PodView]:
        return [p for p in await self.backend.list_pods() if p.workload_key == workload]

    async def wait_for_pods(
        self, workload: str, check: Callable[[list[PodView]], bool], *, timeout_s: float = 10.0
    ) -> list[PodView]:
        """The workload's pods once `check` holds, looking at the cluster after each change."""

        async def changes() -> list[PodView]:
            async for _ in self.backend.watch():
                pods = await self.pods_of(workload)
                if check(pods):
                    return pods
            raise AssertionError("watch ended")

        pods = await self.pods_of(workload)
        if check(pods):
            return pods
        return await asyncio.wait_for(changes(), timeout_s)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    """watcher, gangpermit (1 s timeout off: 30 s), binder and a fast kubelet on one cluster."""
    store = await SimStore.open(bus.js, cluster=CLUSTER)
    backend = SimBackend(store)
    gang_clock = CountingClock()
    s = Stack(bus=bus, backend=backend, events=events, tasks={}, gang_clock=gang_clock)
    kubelet = Kubelet(store, clock=WallClock(), speed=SPEED)
    s.tasks["kubelet"] = asyncio.create_task(kubelet.run())
    await s.start_watcher()
    ready = Ready()
    gang = GangPermitConfig(cluster=CLUSTER, gang_timeout_s=30.0, retry_interval_s=0.2)
    await s.start(
        "gangpermit",
        run_gangpermit(bus, ready, backend=backend, config=gang, clock_ns=gang_clock),
        ready,
    )
    ready = Ready()
    binder = run_binder(bus, ready, backend=backend, config=BinderConfig(cluster=CLUSTER))
    await s.start("binder", binder, ready)
    try:
        yield s
    finally:
        for name in list(s.tasks):
            await s.stop(name)


def node(name: str, *, cpu: str = "4") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


def workload_manifest(
    name: str, *, count: int, cpu: str = "2", run_seconds: str | None = "1"
) -> dict[str, Any]:
    annotations = {"muster.dev/run-seconds": run_seconds} if run_seconds else {}
    container = {"name": "main", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {
            "queueName": "main",
            "podSets": [
                {"name": "main", "count": count, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }


async def submit_and_admit(stack: Stack, name: str, **kw: Any) -> str:
    """Publish what the gateway and admission would: submitted, then admitted (all pods)."""
    manifest = workload_manifest(name, **kw)
    key = f"ns/{name}"
    submitted = events_pb2.WorkloadSubmitted(manifest_json=json.dumps(manifest), queue_name="main")
    await stack.publish("submitted", submitted, workload=key)
    assignment = events_pb2.PodSetAssignment(
        name="main", count=kw["count"], flavors={"cpu": "default"}
    )
    admission = events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    await stack.publish("admitted", events_pb2.WorkloadAdmitted(admission=admission), workload=key)
    return key


def types_of(events: EventLog, workload: str) -> list[str]:
    return [e.type for e in events.seen if e.workload == workload]


async def test_admitted_gang_of_three_is_started_permitted_bound_run_and_finished(
    stack: Stack,
) -> None:
    for name in ("a", "b"):
        await stack.backend.apply(node(name))
    key = await submit_and_admit(stack, "train", count=3)

    permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
    assert len(permitted.gang_permitted.bindings) == 3
    assert {b.node for b in permitted.gang_permitted.bindings} == {"a", "b"}
    pending = stack.events.matching("pods_pending", workload=key)
    assert max(len(e.pods_pending.pods) for e in pending) == 3
    bound = await stack.events.wait_for("bound", workload=key)
    assert bound.cause == permitted.event_id
    await stack.events.wait_for("running", workload=key)
    await stack.events.wait_for("pods_ready", workload=key)
    finished = await stack.events.wait_for("finished", workload=key)
    assert finished.finished.succeeded
    life = [t for t in types_of(stack.events, key) if t != "workload.pods_pending"]
    assert life == [
        "workload.submitted",
        "workload.admitted",
        "workload.gang_permitted",
        "workload.bound",
        "workload.running",
        "workload.pods_ready",
        "workload.finished",
    ]
    placed = sorted(b.node for b in permitted.gang_permitted.bindings)
    await stack.wait_for_pods(key, lambda pods: sorted(p.node_name for p in pods) == placed)


async def test_gang_of_four_waits_whole_until_a_new_node_makes_room(stack: Stack) -> None:
    await stack.backend.apply(node("a", cpu="4"))
    await stack.backend.apply(node("b", cpu="2"))  # room for 3 pods of 2 cpu, not 4
    key = await submit_and_admit(stack, "big", count=4, run_seconds=None)

    await stack.wait_for_pods(key, lambda pods: len(pods) == 4)
    await stack.events.wait_for("pods_pending", workload=key)
    # Two passes after the whole gang is pending: each saw the gang and did not permit it.
    while max(len(e.pods_pending.pods) for e in stack.events.matching("pods_pending")) < 4:
        await stack.gang_clock.wait_for_calls(stack.gang_clock.calls + 1)
    await stack.gang_clock.wait_for_calls(stack.gang_clock.calls + 2)
    assert stack.events.matching("gang_permitted", workload=key) == []
    assert all(not p.node_name for p in await stack.pods_of(key))

    await stack.backend.apply(node("c", cpu="2"))
    permitted = await stack.events.wait_for("gang_permitted", workload=key, timeout_s=10)
    assert "c" in {b.node for b in permitted.gang_permitted.bindings}
    await stack.events.wait_for("bound", workload=key)
    await stack.wait_for_pods(key, lambda pods: len(pods) == 4 and all(p.node_name for p in pods))
    await stack.events.wait_for("running", workload=key)


async def test_gang_that_never_fits_is_rejected_when_its_time_is_up(
    bus: Bus, events: EventLog
) -> None:
    store = await SimStore.open(bus.js, cluster=CLUSTER)
    backend = SimBackend(store)
    s = Stack(bus=bus, backend=backend, events=events, tasks={}, gang_clock=CountingClock())
    await s.start_watcher()
    ready = Ready()
    gang = GangPermitConfig(cluster=CLUSTER, gang_timeout_s=0.5, retry_interval_s=0.1)
    await s.start("gangpermit", run_gangpermit(bus, ready, backend=backend, config=gang), ready)
    ready = Ready()
    await s.start(
        "binder",
        run_binder(bus, ready, backend=backend, config=BinderConfig(cluster=CLUSTER)),
        ready,
    )
    try:
        await backend.apply(node("a", cpu="2"))
        key = await submit_and_admit(s, "huge", count=2)
        rejected = await events.wait_for("gang_rejected", workload=key, timeout_s=10)
        assert rejected.gang_rejected.reason == "GangTimedOut"
        assert "only 1 of 2 pods fit" in rejected.gang_rejected.message
        assert "Insufficient cpu" in rejected.gang_rejected.message
        assert events.matching("gang_permitted", workload=key) == []
    finally:
        for name in list(s.tasks):
            await s.stop(name)


async def test_evict_command_stops_the_pods_then_eviction_completes(stack: Stack) -> None:
    await stack.backend.apply(node("a"))
    key = await submit_and_admit(stack, "victim", count=2, run_seconds=None)
    await stack.events.wait_for("running", workload=key, timeout_s=10)

    evict = events_pb2.EvictRequested(reason="Preempted", message="by ns/other", attempt=1)
    command = await stack.publish("evict_requested", evict, workload=key)
    completed = await stack.events.wait_for("eviction_completed", workload=key, timeout_s=10)
    assert completed.cause == command.event_id
    await stack.wait_for_pods(key, lambda pods: pods == [])


async def test_restarted_watcher_publishes_finished_once(stack: Stack) -> None:
    await stack.backend.apply(node("a"))
    key = await submit_and_admit(stack, "short", count=2, run_seconds="2")
    await stack.events.wait_for("running", workload=key, timeout_s=10)

    # Down while the pods finish: the restarted watcher still reports it, once.
    await stack.stop("watcher")
    await stack.wait_for_pods(key, lambda pods: all(p.phase == "Succeeded" for p in pods))
    await stack.start_watcher()
    await stack.events.wait_for("finished", workload=key, timeout_s=10)

    # Restarted again after reporting it: nothing is repeated. A config object applied after
    # the restart shows the watcher has caught up past the pods' changes.
    await stack.stop("watcher")
    await stack.start_watcher()
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "default"},
    }
    await stack.backend.apply(flavor)
    applied = await stack.events.wait_for("config_applied", timeout_s=10)
    assert applied.config_applied.name == "default"
    assert len(stack.events.matching("finished", workload=key)) == 1
    assert len(stack.events.matching("running", workload=key)) == 1


async def test_watcher_reports_queued_jobs_and_config_objects(stack: Stack) -> None:
    container = {"name": "c", "resources": {"requests": {"cpu": "1"}}}
    queued = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "labels": {"kueue.x-k8s.io/queue-name": "main"},
        },
        "spec": {"parallelism": 2, "template": {"spec": {"containers": [container]}}},
    }
    unqueued = {**queued, "metadata": {"name": "plain", "namespace": "ml"}}
    local_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "main", "namespace": "ml"},
        "spec": {"clusterQueue": "cq"},
    }
    for obj in (unqueued, queued, local_queue):
        await stack.backend.apply(obj)

    sub = await stack.events.wait_for("submitted")
    assert sub.workload.startswith("ml/job-train-")
    assert sub.submitted.queue_name == "main"
    assert (sub.submitted.owner.kind, sub.submitted.owner.name) == ("Job", "train")
    assert [(p.name, p.count) for p in sub.submitted.pod_sets] == [("main", 2)]
    applied = await stack.events.wait_for("config_applied")
    assert (applied.config_applied.kind, applied.config_applied.name) == ("LocalQueue", "ml/main")
    assert json.loads(applied.config_applied.manifest_json)["spec"] == {"clusterQueue": "cq"}

    await stack.backend.delete("LocalQueue", "main", namespace="ml")
    await stack.backend.delete("Job", "train", namespace="ml")
    deleted = await stack.events.wait_for("config_deleted")
    assert deleted.config_deleted.name == "ml/main"
    gone = await stack.events.wait_for("deleted", workload=sub.workload)
    assert len(stack.events.matching("submitted")) == 1  # the unqueued Job is not Kueue's
    assert gone.event_id != sub.event_id


async def test_bind_failure_rejects_the_whole_gang(stack: Stack) -> None:

    await stack.backend.apply(node("a"))
    await stack.backend.apply(node("b"))
    key = "ns/clash"
    starts = [PodSetStart(name="main", count=2, requests={"cpu": 1000})]
    await stack.backend.start_workload(key, pod_sets=starts)
    await stack.backend.bind("ns", "clash-main-0", "b")  # someone else bound it first

    bindings = [
        events_pb2.PodBinding(
            pod=events_pb2.PodRef(namespace="ns", name=f"clash-main-{i}"), node="a"
        )
        for i in range(2)
    ]
    permit = await stack.publish(
        "gang_permitted", events_pb2.GangPermitted(bindings=bindings), workload=key
    )
    rejected = await stack.events.wait_for("gang_rejected", workload=key, timeout_s=10)
    assert rejected.cause == permit.event_id
    assert rejected.gang_rejected.reason == "BindFailed"
    assert "pod ns/clash-main-0 to node a" in rejected.gang_rejected.message
    assert 'already bound to node "b"' in rejected.gang_rejected.message
    assert stack.events.matching("bound", workload=key) == []
