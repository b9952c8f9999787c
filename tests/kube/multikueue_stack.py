"""Several Kubernetes clusters for the MultiKueue end-to-end tests: one API-server stand-in per
cluster (a manager and its workers, each with the stand-in's Job controller), one nats-server,
and every service started from its own flags: admission and preemption once, and watcher,
gang-permit and binder per cluster, either against the cluster's own API server (as from
inside it) or from the manager's side (`--multikueue-cluster`: the worker's API server is the
one its MultiKueueCluster's kubeconfig Secret names)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from kube_services_helpers import UNEXPIRING_LEASE_S, Events, Kubectl, eventually

from muster.admission.service import AdmissionConfig, run_admission
from muster.api.wellknown import WORKLOAD_LABEL
from muster.binder import __main__ as binder_main
from muster.bus import Bus, BusConfig, connect
from muster.bus.service import Health
from muster.devtools.apiserver import ApiServer
from muster.gangpermit import __main__ as gangpermit_main
from muster.launcher.nats_server import NatsServer
from muster.preemption.service import PreemptionConfig, run_preemption
from muster.watcher import __main__ as watcher_main

MANAGER = "local"
MUSTER_NAMESPACE = "muster"
# admission's and the watchers' --cluster-lost-seconds: short, yet several heartbeats (0.2 s)
# long, so that a loaded machine does not lose a worker that is there
LOST_AFTER_S = 4.0
_STOP_S = 15.0  # a service that does not end this long after it is cancelled is a bug
PER_CLUSTER = (("watcher", watcher_main), ("gangpermit", gangpermit_main), ("binder", binder_main))


def kubeconfig(server: str) -> str:
    """A kubeconfig for `server` (the stand-in speaks plain HTTP and checks nobody)."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "worker", "cluster": {"server": server}}],
            "users": [{"name": "muster", "user": {"token": "worker-token"}}],
            "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": "muster"}}],
            "current-context": "worker",
        }
    )


def secret(name: str, data: dict[str, str]) -> str:
    """A Secret in muster's namespace, its values base64-encoded as the API stores them."""
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": MUSTER_NAMESPACE},
            "data": encoded,
        }
    )


class Cluster:
    """One cluster: its stand-in, a kubectl for it, and its services once started."""

    def __init__(self, name: str, server: ApiServer) -> None:
        self.name = name
        self.server = server
        self.kubectl = Kubectl(server.url)
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.healths: dict[str, Health] = {}

    async def stop_api_server(self) -> None:
        """The cluster's API server goes away (its port closes, its watches are cut)."""
        await self.server.stop()

    async def start_api_server(self) -> None:
        """It comes back, on the same port, with what it stored."""
        await self.server.start()


class MultiKueueStack:
    """The manager and its workers on one nats-server; see the module docstring."""

    def __init__(
        self, nats_url: str, bus: Bus, events: Events, *, lost_after_s: float = LOST_AFTER_S
    ) -> None:
        self.nats_url = nats_url
        self.bus = bus
        self.events = events
        self.lost_after_s = lost_after_s  # admission's and the watchers' --cluster-lost-seconds
        self.clusters: dict[str, Cluster] = {}
        self._buses: list[Bus] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def manager(self) -> Cluster:
        return self.clusters[MANAGER]

    async def add_cluster(self, name: str) -> Cluster:
        server = ApiServer(bookmark_interval_s=0.2, job_controller=True)
        await server.start()
        cluster = self.clusters[name] = Cluster(name, server)
        await cluster.kubectl.install_crds()
        return cluster

    async def _start(
        self, name: str, run: Callable[[Bus, Health], Awaitable[None]]
    ) -> tuple[asyncio.Task[None], Health]:
        bus = await connect(BusConfig(url=self.nats_url, name=f"muster-{name}"))
        self._buses.append(bus)
        health = Health(name)
        task = asyncio.create_task(_run(run, bus, health), name=name)
        self._tasks[name] = task
        return task, health

    async def start_services(
        self, cluster: str, *, from_manager: bool = False, reachable: bool = True
    ) -> None:
        """Watcher, gang-permit and binder of `cluster` from their flags: against its own API
        server, or (`from_manager`) against the manager's with `--multikueue-cluster`; once
        each serves (gang-permit not before it has read its cluster: not `reachable`, only
        the others)."""
        own = self.clusters[cluster]
        host = self.manager.server.url if from_manager else own.server.url
        flags = [
            "--nats", self.nats_url, "--cluster", cluster, "--cluster-backend", "kube",
            "--kube-host", host,
        ]  # fmt: skip
        if from_manager:
            flags += [
                "--multikueue-cluster", cluster, "--multikueue-namespace", MUSTER_NAMESPACE,
                "--multikueue-refresh-seconds", "0.5",
            ]  # fmt: skip
        extra = {
            "watcher": ["--cluster-lost-seconds", f"{self.lost_after_s:g}"],
            "gangpermit": ["--heartbeat-seconds", "0.2"],
            "binder": [],
        }
        for service, module in PER_CLUSTER:
            _, main = module.parse([*flags, *extra[service]])
            task, health = await self._start(f"{service}-{cluster}", main)
            own.tasks[service], own.healths[service] = task, health
        waited = [h for s, h in own.healths.items() if reachable or s != "gangpermit"]
        await self._serving(waited)

    async def start_admission(self) -> None:
        settings = AdmissionConfig(
            lease_ttl_s=UNEXPIRING_LEASE_S,
            lease_renew_s=0.5,
            ack_wait_s=2.0,
            cluster_lost_s=self.lost_after_s,
        )
        _, admission = await self._start(
            "admission", lambda bus, health: run_admission(bus, health, settings)
        )
        preemption = PreemptionConfig(resend_s=1.0)
        _, evictions = await self._start(
            "preemption", lambda bus, health: run_preemption(bus, health, preemption)
        )
        await self._serving([admission, evictions])

    async def _serving(self, healths: Sequence[Health]) -> None:
        async def serving() -> bool:
            self.check_alive()
            return all(h.serving for h in healths)

        await eventually(serving)

    async def stop_services(self, cluster: str) -> None:
        own = self.clusters[cluster]
        for task in own.tasks.values():
            task.cancel()
        await asyncio.gather(*own.tasks.values(), return_exceptions=True)
        for service in own.tasks:
            self._tasks.pop(f"{service}-{cluster}", None)
        own.tasks.clear()

    def check_alive(self) -> None:
        """Fail with the error of a service that died."""
        for name, task in self._tasks.items():
            if task.done():
                task.result()
                raise AssertionError(f"{name} ended")

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        if self._tasks:
            _, stuck = await asyncio.wait(self._tasks.values(), timeout=_STOP_S)
            assert not stuck, f"services that did not stop: {sorted(t.get_name() for t in stuck)}"
        for bus in self._buses:
            await bus.close()
        for cluster in self.clusters.values():
            cluster.kubectl.close()
            await cluster.server.stop()


async def _run(run: Callable[[Bus, Health], Awaitable[None]], bus: Bus, health: Health) -> None:
    await run(bus, health)


@contextlib.asynccontextmanager
async def multikueue_stack(
    tmp_path: Path, *workers: str, lost_after_s: float = LOST_AFTER_S
) -> AsyncIterator[MultiKueueStack]:
    """A nats-server, admission and preemption, and a stand-in for the manager (its services
    started) and for each of `workers` (their services are the test's to start); a worker
    silent or unreachable for `lost_after_s` is lost."""
    nats = NatsServer(tmp_path / "nats")
    url = await nats.start(log_path=tmp_path / "nats.log")
    try:
        bus = await connect(BusConfig(url=url, name="muster-test", connect_timeout_s=5.0))
        await bus.ensure_streams()
        events = Events(bus)
        events.start()
        stack = MultiKueueStack(url, bus, events, lost_after_s=lost_after_s)
        try:
            for name in (MANAGER, *workers):
                await stack.add_cluster(name)
            await stack.start_admission()
            await stack.start_services(MANAGER)
            yield stack
            stack.check_alive()
        finally:
            await stack.stop()
            await events.stop()
            await bus.close()
    finally:
        await nats.stop()


def pods_of(pods: list[dict[str, Any]], workload: str) -> list[dict[str, Any]]:
    """The pods labelled as `workload`'s (muster.dev/workload: its name)."""
    name = workload.partition("/")[2]
    return [p for p in pods if (p["metadata"].get("labels") or {}).get(WORKLOAD_LABEL) == name]
