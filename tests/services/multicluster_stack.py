"""Several simulated clusters on one bus, each with its own watcher, gang-permit, binder and
kubelet (as `muster run --clusters` starts them), for the MultiKueue service tests.

A cluster's services run as tasks on the test's bus; `kill` cancels them all at once (the
cluster disappears), `start` brings them back on the same store (the cluster returns).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import yaml
from admission_world import eventually
from budget import wait_s
from bus_helpers import EventLog
from placement_stack import Ready

from muster.binder.service import BinderConfig, run_binder
from muster.bus import Bus
from muster.bus.buckets import CLUSTERS_BUCKET
from muster.cluster.objects import PodView
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.clock import WallClock
from muster.cluster.sim.kubelet import Kubelet
from muster.cluster.sim.store import SimStore
from muster.contracts.v1 import events_pb2
from muster.gangpermit.service import GangPermitConfig, run_gangpermit
from muster.gateway.clusters import room_of
from muster.watcher.service import WatcherConfig, run_watcher

SPEED = 20.0  # pods run 20 times faster than their muster.dev/run-seconds
HEARTBEAT_S = 0.2


@dataclass
class SimCluster:
    """One cluster's store and services."""

    name: str
    bus: Bus
    backend: SimBackend
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    async def start(self) -> None:
        """kubelet, watcher, gang-permit and binder, each serving before the next starts."""
        kubelet = Kubelet(self.backend.store, clock=WallClock(), speed=SPEED)
        self.tasks["kubelet"] = asyncio.create_task(kubelet.run(), name=f"{self.name}-kubelet")
        cluster = self.name
        await self._start(
            "watcher",
            lambda ready: run_watcher(
                self.bus, ready, backend=self.backend, config=WatcherConfig(cluster=cluster)
            ),
        )
        gangpermit = GangPermitConfig(cluster=cluster, gang_timeout_s=30.0, heartbeat_s=HEARTBEAT_S)
        await self._start(
            "gangpermit",
            lambda ready: run_gangpermit(self.bus, ready, backend=self.backend, config=gangpermit),
        )
        await self._start(
            "binder",
            lambda ready: run_binder(
                self.bus, ready, backend=self.backend, config=BinderConfig(cluster=cluster)
            ),
        )

    async def _start(self, name: str, body: Callable[[Ready], Coroutine[Any, Any, None]]) -> None:
        ready = Ready()
        task = asyncio.create_task(body(ready), name=f"{self.name}-{name}")
        self.tasks[name] = task
        waiter = asyncio.create_task(ready.event.wait())
        await asyncio.wait({task, waiter}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()  # it died: show why
        assert ready.event.is_set(), f"{self.name} {name} did not become ready"

    async def kill(self) -> None:
        """Every service of the cluster stops at once, without a word to anyone."""
        tasks, self.tasks = self.tasks, {}
        for task in tasks.values():
            task.cancel()
        for task in tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def pods_of(self, workload: str) -> list[PodView]:
        return [p for p in await self.backend.list_pods() if p.group == workload]


@contextlib.asynccontextmanager
async def sim_clusters(bus: Bus, *names: str) -> Any:
    """The named clusters, started; stopped when the block ends."""
    clusters = [
        SimCluster(name, bus, SimBackend(await SimStore.open(bus.kv, cluster=name)))
        for name in names
    ]
    try:
        for cluster in clusters:
            await cluster.start()
        yield {cluster.name: cluster for cluster in clusters}
    finally:
        for cluster in clusters:
            await cluster.kill()


async def reported(bus: Bus, cluster: str, *nodes: str) -> None:
    """Wait until `cluster`'s heartbeat lists `nodes`, as `muster run` does before its first
    workload: dispatch goes by the room heartbeats report, so a workload submitted earlier
    would go to whichever cluster happened to report its node first."""
    kv = await bus.kv(CLUSTERS_BUCKET)

    async def listed() -> bool:
        room = await room_of(kv, cluster)
        return room is not None and set(nodes) <= {node.name for node in room.nodes}

    await eventually(listed)


async def watchers(bus: Bus) -> int:
    """Consumers of the registry's stream: each replica following it has one (its KV watch)."""
    info = await bus.js.stream_info(f"KV_{CLUSTERS_BUCKET}")
    return int(info.state.consumer_count)


def node(name: str, *, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


def about(events: EventLog, field: str, workload: str) -> list[events_pb2.Envelope]:
    """Every `field` event about `workload`, in stream order."""
    return [e for e in events.seen if e.WhichOneof("payload") == field and e.workload == workload]


async def wait_for(
    events: EventLog,
    field: str,
    workload: str,
    *,
    cluster: str | None = None,
    source: str | None = None,
    timeout_s: float | None = None,
) -> events_pb2.Envelope:
    """The first `field` event about `workload` (from `cluster`, by `source`), waiting."""

    def found() -> events_pb2.Envelope | None:
        for env in about(events, field, workload):
            if cluster in (None, env.cluster) and source in (None, env.source):
                return env
        return None

    changed = events._changed  # EventLog's condition, notified on every event it records
    async with changed:
        try:
            await asyncio.wait_for(changed.wait_for(lambda: found() is not None), wait_s(timeout_s))
        except TimeoutError:
            seen = [f"{e.type} {e.workload} @{e.cluster}" for e in events.seen]
            raise AssertionError(f"no {field} of {workload} from {cluster}: {seen}") from None
    env = found()
    assert env is not None
    return env


def multikueue_config(*clusters: str, cpu: int) -> str:
    """A ClusterQueue `global` of `cpu` cpu whose admission check dispatches to `clusters`
    (in that order), LocalQueue ml/main, as YAML for Submit."""
    members = "".join(
        f"""---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {{name: {name}}}
"""
        for name in clusters
    )
    return f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: default}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {{name: dispatch}}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {{apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: workers}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {{name: workers}}
spec: {{clusters: [{", ".join(clusters)}]}}
{members}---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: global}}
spec:
  namespaceSelector: {{}}
  admissionChecksStrategy: {{admissionChecks: [{{name: dispatch}}]}}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{{name: cpu, nominalQuota: {cpu}}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: main, namespace: ml}}
spec: {{clusterQueue: global}}
"""


def job(name: str, *, pods: int, cpu: str = "1", run_seconds: int | None = None) -> str:
    """A Kueue Workload in ml/main of `pods` pods of `cpu` each, as YAML for Submit."""
    annotations = {} if run_seconds is None else {"muster.dev/run-seconds": str(run_seconds)}
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    podset = {"name": "main", "count": pods, "template": {"spec": {"containers": [container]}}}
    return yaml.safe_dump(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
            "spec": {"queueName": "main", "podSets": [podset]},
        }
    )
