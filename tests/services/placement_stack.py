"""The per-cluster services in-process on a test's bus: watcher, gangpermit, binder, the sim
kubelet, and a gateway for Submit. Used by the pod-path and gang-placement service tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import yaml
from bus_helpers import EventLog
from gateway_helpers import RunningGateway, running_gateway

from muster.binder.service import BinderConfig, run_binder
from muster.bus import Bus, BusConfig, new_event
from muster.cluster.backend import ClusterBackend, ClusterChange
from muster.cluster.objects import PodView
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.clock import WallClock
from muster.cluster.sim.kubelet import Kubelet
from muster.cluster.sim.store import SimStore
from muster.contracts.v1 import events_pb2, services_pb2
from muster.gangpermit.service import GangPermitConfig, run_gangpermit
from muster.watcher.service import WatcherConfig, run_watcher

CLUSTER = "local"
SPEED = 20.0  # pods run 20 times faster than their muster.dev/run-seconds


class Ready:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def ready(self) -> None:
        self.event.set()


@dataclass
class Stack:
    bus: Bus
    backend: SimBackend
    events: EventLog
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    gateway: RunningGateway | None = None
    gangpermit_backend: ClusterBackend | None = None  # gang-permit's view, when not `backend`

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
        config = WatcherConfig(cluster=CLUSTER)
        await self.start(
            "watcher", run_watcher(self.bus, ready, backend=self.backend, config=config), ready
        )

    async def start_gangpermit(self, **config: Any) -> None:
        ready = Ready()
        settings = GangPermitConfig(cluster=CLUSTER, **{"gang_timeout_s": 30.0, **config})
        backend = self.gangpermit_backend or self.backend
        body = run_gangpermit(self.bus, ready, backend=backend, config=settings)
        await self.start("gangpermit", body, ready)

    async def start_binder(self, backend: ClusterBackend | None = None, **config: Any) -> None:
        ready = Ready()
        body = run_binder(
            self.bus,
            ready,
            backend=backend or self.backend,
            config=BinderConfig(cluster=CLUSTER, **config),
        )
        await self.start("binder", body, ready)

    def start_kubelet(self) -> None:
        kubelet = Kubelet(self.backend.store, clock=WallClock(), speed=SPEED)
        self.tasks["kubelet"] = asyncio.create_task(kubelet.run(), name="kubelet")

    async def stop(self, name: str) -> None:
        task = self.tasks.pop(name)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def stop_all(self) -> None:
        for name in list(self.tasks):
            await self.stop(name)

    async def publish(self, field: str, payload: Any, *, workload: str) -> events_pb2.Envelope:
        env = new_event(field, payload, cluster=CLUSTER, workload=workload, source="test")
        await self.bus.publish(env)
        return env

    async def submit(self, manifest: str) -> services_pb2.SubmitResponse:
        assert self.gateway is not None, "this stack has no gateway"
        reply: services_pb2.SubmitResponse = await self.gateway.gateway.Submit(
            services_pb2.SubmitRequest(manifest=manifest)
        )
        return reply

    async def apply_all(self, text: str) -> None:
        """The objects of `text` written straight into the cluster, as `kubectl apply -f`
        does (binder or not)."""
        for doc in yaml.safe_load_all(text):
            await self.backend.apply(doc)

    async def pods_of(self, group: str) -> list[PodView]:
        """The pods whose life events name `group` (a workload or gang key)."""
        return [p for p in await self.backend.list_pods() if p.group == group]

    async def wait_for_pods(
        self, group: str, check: Callable[[list[PodView]], bool], *, timeout_s: float = 10.0
    ) -> list[PodView]:
        """The group's pods once `check` holds, looking at the cluster after each change."""

        async def changes() -> list[PodView]:
            async for _ in self.backend.watch():
                pods = await self.pods_of(group)
                if check(pods):
                    return pods
            raise AssertionError("watch ended")

        pods = await self.pods_of(group)
        if check(pods):
            return pods
        return await asyncio.wait_for(changes(), timeout_s)


@contextlib.asynccontextmanager
async def pod_writes(stack: Stack) -> AsyncIterator[list[ClusterChange]]:
    """Every write to a pod of the sim cluster while the block runs, in order."""
    seen: list[ClusterChange] = []
    start = await stack.backend.current_revision()

    async def record() -> None:
        async for change in stack.backend.watch(from_revision=start or 1):
            if change.kind == "Pod":
                seen.append(change)  # noqa: PERF401  # read while it runs, until cancelled

    task = asyncio.create_task(record())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def placement_stack(
    bus: Bus,
    events: EventLog,
    *,
    gangpermit: dict[str, Any] | None = None,
    binder_backend: Callable[[SimBackend], ClusterBackend] | None = None,
    gateway: bool = False,
    kubelet: bool = True,
    placed_first: bool = True,
) -> AsyncIterator[Stack]:
    """watcher, gangpermit (`gangpermit` config overrides), binder, kubelet and a gateway;
    `placed_first` False: Kueue workloads' pods created unbound, then bound."""
    store = await SimStore.open(bus.kv, cluster=CLUSTER)
    backend = SimBackend(store, placed_first=placed_first)
    stack = Stack(bus=bus, backend=backend, events=events)
    async with contextlib.AsyncExitStack() as exits:
        if gateway:
            stack.gateway = await exits.enter_async_context(running_gateway(bus))
        try:
            if kubelet:
                stack.start_kubelet()
            await stack.start_watcher()
            await stack.start_gangpermit(**(gangpermit or {}))
            await stack.start_binder(binder_backend(backend) if binder_backend else None)
            yield stack
        finally:
            await stack.stop_all()


@contextlib.asynccontextmanager
async def preemption_stack(
    bus: Bus,
    events: EventLog,
    *,
    binder_backend: Callable[[SimBackend], ClusterBackend],
    gangpermit: dict[str, Any],
) -> AsyncIterator[Stack]:
    """`placement_stack` with no kubelet: node n0 full with gang `ns/low` (4 pods of one CPU,
    bound), then gang `ns/high` (priority 100, one pod of 4 CPUs) applied: it fits only by
    preempting `low`."""
    stack = placement_stack(
        bus, events, kubelet=False, binder_backend=binder_backend, gangpermit=gangpermit
    )
    async with stack as s:
        await s.backend.apply(node("n0", cpu="4"))
        await s.apply_all(gang_yaml("low", pods=4))
        await s.wait_for_pods(
            "ns/low/workers", lambda pods: all(p.node_name for p in pods), timeout_s=20
        )
        high = gang_yaml("high", pods=1, cpu="4")
        await s.apply_all(high.replace("  workloadRef:", "  priority: 100\n  workloadRef:"))
        yield s


def node(name: str, *, cpu: str = "4", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
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
    """Publish what the gateway and admission would: submitted, then admitted (all pods; with
    the manifest's copy unless `copied` is False, as for one over 256 KiB)."""
    copied = kw.pop("copied", True)
    manifest = json.dumps(workload_manifest(name, **kw))
    key = f"ns/{name}"
    submitted = events_pb2.WorkloadSubmitted(manifest_json=manifest, queue_name="main")
    await stack.publish("submitted", submitted, workload=key)
    assignment = events_pb2.PodSetAssignment(
        name="main", count=kw["count"], flavors={"cpu": "default"}
    )
    admission = events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    admitted = events_pb2.WorkloadAdmitted(
        admission=admission,
        manifest_json=manifest if copied else "",
        origin_cluster=CLUSTER,
        with_reservation=True,  # no admission check, as admission tells it
    )
    await stack.publish("admitted", admitted, workload=key)
    return key


def gang_yaml(
    name: str,
    *,
    pods: int,
    min_count: int | None = None,
    cpu: str = "1",
    run_seconds: str | None = None,
    namespace: str = "ns",
    scheduler: str = "muster",
) -> str:
    """A scheduling.k8s.io/v1alpha1 Workload with pod group `workers` (a gang of `min_count`,
    default every pod) and its `pods` Pods, as a user writes them."""
    annotations = f'annotations: {{muster.dev/run-seconds: "{run_seconds}"}}' if run_seconds else ""
    docs = [
        f"""apiVersion: scheduling.k8s.io/v1alpha1
kind: Workload
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  podGroups:
  - name: workers
    policy: {{gang: {{minCount: {min_count or pods}}}}}
"""
    ]
    docs += [
        f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}-{i}
  namespace: {namespace}
  {annotations}
spec:
  schedulerName: {scheduler}
  workloadRef: {{name: {name}, podGroup: workers}}
  containers: [{{name: main, resources: {{requests: {{cpu: "{cpu}"}}}}}}]
"""
        for i in range(pods)
    ]
    return "---\n".join(docs)


def types_of(events: EventLog, workload: str) -> list[str]:
    return [e.type for e in events.seen if e.workload == workload]


@contextlib.asynccontextmanager
async def bare_nodes_stack(
    bus: Bus, events: EventLog, *, nodes: int, cpu: str = "1000"
) -> AsyncIterator[Stack]:
    """The pod path without the kubelet (pods are bound, never run) on `nodes` nodes n0, n1,
    ... of `cpu` CPUs and 110 pods each: where a large workload's binding is watched."""
    async with placement_stack(bus, events, kubelet=False) as s:
        for i in range(nodes):
            await s.backend.apply(node(f"n{i}", cpu=cpu))
        yield s


def limited_bus_config(nats_server: str, max_event_bytes: int) -> BusConfig:
    """The test bus with its event limit lowered, so that a few hundred pods are over it as
    tens of thousands are at the default 1 MiB."""
    return BusConfig(
        url=nats_server, name="muster-test", connect_timeout_s=5.0, max_event_bytes=max_event_bytes
    )
