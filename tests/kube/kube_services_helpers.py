"""muster's services against the API-server stand-in, for the end-to-end tests: a nats-server,
every service in-process on its own NATS connection (watcher, gangpermit and binder started
from their own flags with `--cluster-backend kube`), a `Kubectl` that drives the stand-in with
the official client as an operator (and a Job controller) would, and the events published."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from budget import wait_s
from kube_helpers import api_client, as_json, as_model, http_response
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from muster.admission.service import AdmissionConfig, run_admission
from muster.api import kueue_config_from_file
from muster.binder import __main__ as binder_main
from muster.bus import EVENTS_STREAM, Bus, BusConfig, connect
from muster.bus.service import Health
from muster.contracts.v1 import events_pb2 as pb
from muster.devtools.apiserver import ApiServer
from muster.devtools.apiserver.access import Access
from muster.gangpermit import __main__ as gangpermit_main
from muster.launcher.nats_server import NatsServer
from muster.preemption.service import PreemptionConfig, run_preemption
from muster.watcher import __main__ as watcher_main

T = TypeVar("T")
# The stacks running now. A service that dies ends nothing else (its task holds the error
# until the stack stops), so the waits look at them: else a dead watcher looked like a
# stalled one until the test's budget ran out, its error never shown.
_RUNNING: list[Stack] = []
# No test here restarts admission, so its shard lease need not expire for a successor: with a
# 2 s TTL, a loaded test process that did not renew it for 1.5 s lost it (LeaseLostError).
UNEXPIRING_LEASE_S = 600.0
CRDS = Path(__file__).resolve().parents[2] / "k8s" / "crds"
KUEUE = ("kueue.x-k8s.io", "v1beta1")
SCHEDULING = "scheduling.k8s.io"
# kind → (plural, namespaced) of the Kueue objects the tests write
KUEUE_KINDS = {
    "ResourceFlavor": ("resourceflavors", False),
    "ClusterQueue": ("clusterqueues", False),
    "LocalQueue": ("localqueues", True),
    "WorkloadPriorityClass": ("workloadpriorityclasses", False),
    "Cohort": ("cohorts", False),
    "Workload": ("workloads", True),
    "AdmissionCheck": ("admissionchecks", False),
    "ProvisioningRequestConfig": ("provisioningrequestconfigs", False),
    "MultiKueueConfig": ("multikueueconfigs", False),
    "MultiKueueCluster": ("multikueueclusters", False),
}


async def eventually(
    check: Callable[[], Awaitable[T | None]], *, timeout_s: float | None = None
) -> T:
    """The first truthy result of `check()`, asked every 20 ms until `timeout_s` (None: what
    is left of the test's time, `tests/budget.py`), then the test fails with the last result.
    A service of a running stack that died fails it at once, with the service's error."""
    timeout_s = wait_s(timeout_s)
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        for stack in _RUNNING:
            stack.check_alive()
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.02)  # the state lives in the API server or NATS: ask again
    raise AssertionError(f"not so after {timeout_s:g}s; last seen: {last!r}")


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    """The condition `type_` of `obj`'s status ({} when it has none)."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            found: dict[str, Any] = c
            return found
    return {}


class Kubectl:
    """What `kubectl` and the Job controller do, through the official (synchronous) client on
    a thread, so the services on the test's event loop keep running meanwhile."""

    def __init__(self, url: str, *, token: str | None = None) -> None:
        self._api = api_client(url, token=token)
        self.core = client.CoreV1Api(self._api)
        self.batch = client.BatchV1Api(self._api)
        self.custom = client.CustomObjectsApi(self._api)

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]  # the client has no hints here

    async def apply(self, text: str) -> None:
        """Create every document of `text` (YAML), in order."""
        for doc in yaml.safe_load_all(text):
            if doc:
                await asyncio.to_thread(self._create, doc)

    def _create(self, obj: dict[str, Any]) -> None:
        if obj["kind"] == "List":
            for item in obj["items"]:
                self._create(item)
            return
        kind, meta = obj["kind"], obj["metadata"]
        namespace = meta.get("namespace", "default")
        if str(obj.get("apiVersion", "")).startswith(f"{SCHEDULING}/"):
            version = obj["apiVersion"].split("/")[1]
            plural = f"{kind.lower()}s"
            self.custom.create_namespaced_custom_object(SCHEDULING, version, namespace, plural, obj)
        elif kind in KUEUE_KINDS:
            plural, namespaced = KUEUE_KINDS[kind]
            group, version = str(obj.get("apiVersion", "/".join(KUEUE))).split("/")
            if namespaced:
                self.custom.create_namespaced_custom_object(group, version, namespace, plural, obj)
            else:
                self.custom.create_cluster_custom_object(group, version, plural, obj)
        elif kind == "Namespace":
            self.core.create_namespace(as_model(client.V1Namespace, obj))
        elif kind == "Secret":
            self.core.create_namespaced_secret(namespace, as_model(client.V1Secret, obj))
        elif kind == "LimitRange":
            self.core.create_namespaced_limit_range(namespace, as_model(client.V1LimitRange, obj))
        elif kind == "Node":
            self.core.create_node(as_model(client.V1Node, obj))
        elif kind == "RuntimeClass":
            node = client.NodeV1Api(self._api)
            node.create_runtime_class(as_model(client.V1RuntimeClass, obj))
        elif kind == "Pod":
            self.core.create_namespaced_pod(namespace, as_model(client.V1Pod, obj))
        elif kind == "Job":
            self.batch.create_namespaced_job(namespace, as_model(client.V1Job, obj))
        elif str(obj.get("apiVersion", "")).startswith(f"{SCHEDULING}/"):
            version = obj["apiVersion"].split("/")[1]
            plural = f"{kind.lower()}s"
            self.custom.create_namespaced_custom_object(SCHEDULING, version, namespace, plural, obj)
        else:
            raise AssertionError(f"the tests do not create {kind}")

    async def install_crds(self) -> None:
        """muster's own Kueue CRDs (k8s/crds), as on a cluster without Kueue: what muster writes
        with `fieldValidation=Strict` is then checked against their schemas."""
        extensions = client.ApiextensionsV1Api(self._api)
        for path in sorted(CRDS.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    await asyncio.to_thread(extensions.create_custom_resource_definition, doc)

    async def replace_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Replace Secret `name`'s data (plain text values, stored base64-encoded)."""
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        body = {"metadata": {"name": name, "namespace": namespace}, "data": encoded}
        await asyncio.to_thread(
            self.core.replace_namespaced_secret, name, namespace, as_model(client.V1Secret, body)
        )

    async def list_pods(self, namespace: str) -> list[dict[str, Any]]:
        """The pods of `namespace` as stored (JSON)."""

        def read() -> list[dict[str, Any]]:
            raw = http_response(self.core.list_namespaced_pod(namespace, _preload_content=False))
            items: list[dict[str, Any]] = json.loads(raw.data)["items"]
            return items

        return await asyncio.to_thread(read)

    async def scheduling_object(
        self, plural: str, name: str, namespace: str, *, version: str = "v1beta1"
    ) -> dict[str, Any]:
        """A scheduling.k8s.io object (PodGroup, Workload) as stored."""
        found = await asyncio.to_thread(
            self.custom.get_namespaced_custom_object, SCHEDULING, version, namespace, plural, name
        )
        return as_json(found)

    async def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The object as stored, or None when it does not exist."""

        def read() -> dict[str, Any] | None:
            try:
                if kind in KUEUE_KINDS:
                    plural, namespaced = KUEUE_KINDS[kind]
                    got = (
                        self.custom.get_namespaced_custom_object(*KUEUE, namespace, plural, name)
                        if namespaced
                        else self.custom.get_cluster_custom_object(*KUEUE, plural, name)
                    )
                    return as_json(got)
                reader = {
                    "Job": self.batch.read_namespaced_job,
                    "Pod": self.core.read_namespaced_pod,
                }[kind]
                raw = http_response(reader(name, namespace, _preload_content=False))
                decoded: dict[str, Any] = json.loads(raw.data)
                return decoded
            except ApiException as err:
                if err.status == 404:
                    return None
                raise

        return await asyncio.to_thread(read)

    async def workloads(self, namespace: str) -> list[dict[str, Any]]:
        found = await asyncio.to_thread(
            self.custom.list_namespaced_custom_object, *KUEUE, namespace, "workloads"
        )
        items: list[dict[str, Any]] = as_json(found)["items"]
        return items

    async def run_job_pods(self, job: dict[str, Any]) -> list[str]:
        """What the Job controller does for an unsuspended Job: one pod per `parallelism` from
        its template, controlled by the Job. Their names."""
        meta, spec = job["metadata"], job["spec"]
        template = spec["template"]
        names = []
        for i in range(spec.get("parallelism", 1)):
            name = f"{meta['name']}-{i}"
            labels = {**template["metadata"].get("labels", {}), "job-name": meta["name"]}
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "labels": labels,
                    "annotations": template["metadata"].get("annotations", {}),
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": template["spec"],
            }
            await asyncio.to_thread(self._create, pod)
            names.append(name)
        return names

    async def set_pod_phase(
        self, namespace: str, name: str, phase: str, *, ready: bool | None = None
    ) -> None:
        """What the kubelet writes: the phase and the Ready condition (True while it runs,
        unless `ready` says its readiness probe has not passed)."""
        ready = phase == "Running" if ready is None else ready
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {"type": "Ready", "status": str(ready), "lastTransitionTime": now}
        body = {"status": {"phase": phase, "conditions": [condition]}}
        await asyncio.to_thread(self.core.patch_namespaced_pod_status, name, namespace, body)

    async def delete_pod(self, namespace: str, name: str) -> None:
        await asyncio.to_thread(
            self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0
        )

    async def complete_job(self, namespace: str, name: str) -> None:
        """What the Job controller writes once every completion succeeded."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {"type": "Complete", "status": "True", "lastTransitionTime": now}
        body = {"status": {"conditions": [condition], "succeeded": 1, "completionTime": now}}
        await asyncio.to_thread(self.batch.patch_namespaced_job_status, name, namespace, body)


class Events:
    """Every envelope stored in MUSTER_EVENTS from the start, followed by a task."""

    def __init__(self, bus: Bus) -> None:
        self.seen: list[pb.Envelope] = []
        self._bus = bus
        self._task: asyncio.Task[None] | None = None

    async def _follow(self) -> None:
        async for env in self._bus.replay([">"], stream=EVENTS_STREAM, follow=True):
            self.seen.append(env)

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def check_alive(self) -> None:
        """Fail with the error that ended the following (else a wait for an event that was
        published would wait out the test's budget)."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            error = self._task.exception()
            raise AssertionError(f"following the events ended: {error!r}") from error

    def of(self, workload: str, event_type: str | None = None) -> list[pb.Envelope]:
        """What has been followed so far: may lag what a service has already acted on (read
        in a wait's check; after one, `told`)."""
        return [
            e
            for e in self.seen
            if e.workload == workload and (event_type is None or e.type == event_type)
        ]

    async def caught_up(self) -> None:
        """Return once every envelope stored before the call has been followed. The follower
        is one more reader of the stream: a status that a service wrote for an event can be
        read from the API server before the follower has that event."""
        target = await self._bus.last_sequence(EVENTS_STREAM)

        async def followed() -> bool:
            return bool(self.seen) and self.seen[-1].sequence >= target

        if target:
            await eventually(followed)

    async def told(self, workload: str, event_type: str | None = None) -> list[pb.Envelope]:
        """`of` once caught up: every event published before the call, for reading after a
        wait for an object's state (which a service wrote after the events behind it)."""
        await self.caught_up()
        return self.of(workload, event_type)

    async def wait_for(
        self, workload: str, event_type: str, *, timeout_s: float | None = None
    ) -> None:
        await self.arrived(workload, event_type, timeout_s=timeout_s)

    async def arrived(
        self, workload: str, event_type: str, count: int = 1, *, timeout_s: float | None = None
    ) -> list[pb.Envelope]:
        """`of(workload, event_type)` once it holds `count` events (a list asserted whole
        must not be read while the last of them is still on its way)."""

        async def enough() -> list[pb.Envelope] | None:
            found = self.of(workload, event_type)
            return found if len(found) >= count else None

        return await eventually(enough, timeout_s=timeout_s)


class Stack:
    """The services of one cluster ("local") on one nats-server and one API-server stand-in."""

    def __init__(self, *, bus: Bus, server: ApiServer, kubectl: Kubectl, events: Events) -> None:
        self.bus = bus
        self.server = server
        self.kubectl = kubectl
        self.events = events
        self.healths: dict[str, Health] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._buses: list[Bus] = []

    async def _start(
        self, name: str, run: Callable[[Bus, Health], Awaitable[None]], url: str
    ) -> None:
        bus = await connect(BusConfig(url=url, name=f"muster-{name}", connect_timeout_s=5.0))
        self._buses.append(bus)
        health = Health(name)
        self.healths[name] = health
        self.tasks[name] = asyncio.create_task(_run(run, bus, health), name=name)

    async def start(
        self,
        nats_url: str,
        *,
        kube_flags: list[str],
        service_flags: Mapping[str, Sequence[str]] | None = None,
        kueue_config: Path | None = None,
    ) -> None:
        """Every service (with its own `service_flags`, when given; admission and the watcher
        with Kueue's Configuration `kueue_config`, when given, as deploy/ mounts it for both);
        returns once each reports SERVING."""
        shared = {"watcher": ["--kueue-config", str(kueue_config)]} if kueue_config else {}
        flags = ["--nats", nats_url, "--cluster-backend", "kube", "--kube-host", self.server.url]
        for name, module in (
            ("watcher", watcher_main),
            ("gangpermit", gangpermit_main),
            ("binder", binder_main),
        ):
            own = [*shared.get(name, ()), *(service_flags or {}).get(name, ())]
            _, main = module.parse([*flags, *kube_flags, *own])
            await self._start(name, main, nats_url)
        kueue = None
        if kueue_config is not None:
            kueue, errors = kueue_config_from_file(str(kueue_config))
            assert kueue is not None, errors
        admission = AdmissionConfig(
            lease_ttl_s=UNEXPIRING_LEASE_S, lease_renew_s=0.5, ack_wait_s=2.0, kueue=kueue
        )
        await self._start(
            "admission", lambda bus, health: run_admission(bus, health, admission), nats_url
        )
        await self._start(
            "preemption",
            lambda bus, health: run_preemption(bus, health, PreemptionConfig()),
            nats_url,
        )

        async def serving() -> bool:
            self.check_alive()
            return all(h.serving for h in self.healths.values())

        await eventually(serving)

    def check_alive(self) -> None:
        """Fail with the error of a service that died (or of the events' follower)."""
        self.events.check_alive()
        for name, task in self.tasks.items():
            if task.done() and not task.cancelled():
                error = task.exception()
                raise AssertionError(f"service {name} ended: {error!r}") from error

    async def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for bus in self._buses:
            await bus.close()


async def _run(run: Callable[[Bus, Health], Awaitable[None]], bus: Bus, health: Health) -> None:
    await run(bus, health)


@contextlib.asynccontextmanager
async def running_stack(
    tmp_path: Path,
    *,
    kube_flags: tuple[str, ...] = (),
    access: Access | None = None,
    admin_token: str | None = None,
    service_flags: Mapping[str, Sequence[str]] | None = None,
    server: Mapping[str, Any] | None = None,
    kueue_config: str | None = None,
) -> AsyncIterator[Stack]:
    """A fresh nats-server and stand-in (`server`: its options) with every service started on
    them; with `access`, the stand-in checks it (`kube_flags` then name each service's
    credentials, and the test's kubectl uses `admin_token`); `kueue_config`: the YAML of
    Kueue's Configuration that admission and the watcher read."""
    config_path = None
    if kueue_config is not None:
        config_path = tmp_path / "kueue-config.yaml"
        config_path.write_text(kueue_config)
    nats = NatsServer(tmp_path / "nats")
    url = await nats.start(log_path=tmp_path / "nats.log")
    try:
        bus = await connect(BusConfig(url=url, name="muster-test", connect_timeout_s=5.0))
        await bus.ensure_streams()
        async with ApiServer(bookmark_interval_s=0.2, access=access, **(server or {})) as standin:
            kubectl = Kubectl(standin.url, token=admin_token)
            await kubectl.install_crds()
            events = Events(bus)
            events.start()
            stack = Stack(bus=bus, server=standin, kubectl=kubectl, events=events)
            _RUNNING.append(stack)
            try:
                await stack.start(
                    url,
                    kube_flags=list(kube_flags),
                    service_flags=service_flags,
                    kueue_config=config_path,
                )
                yield stack
                stack.check_alive()
            finally:
                _RUNNING.remove(stack)
                await stack.stop()
                await events.stop()
                kubectl.close()
                await bus.close()
    finally:
        await nats.stop()


# --- waiting for object state ------------------------------------------------------------


async def patch_active(kubectl: Kubectl, namespace: str, name: str, active: bool) -> None:
    """What `kueuectl stop|resume workload` writes: Kueue Workload `name`'s spec.active."""
    await asyncio.to_thread(
        kubectl.custom.patch_namespaced_custom_object,
        *KUEUE,
        namespace,
        "workloads",
        name,
        {"spec": {"active": active}},
    )


async def workload_of_job(kubectl: Kubectl, namespace: str, job: str) -> dict[str, Any]:
    """The Kueue Workload controlled by Job `job`, once it exists."""
    uid = (await kubectl.get("Job", job, namespace) or {})["metadata"]["uid"]

    async def owned() -> dict[str, Any] | None:
        for wl in await kubectl.workloads(namespace):
            refs = wl["metadata"].get("ownerReferences") or []
            if any(r["uid"] == uid and r.get("controller") and r["kind"] == "Job" for r in refs):
                return wl
        return None

    return await eventually(owned)


async def status_when(
    kubectl: Kubectl, kind: str, name: str, namespace: str = "", **expected: Any
) -> dict[str, Any]:
    """The object once its status has every `expected` field (camelCase) as given."""

    seen: list[Any] = [None]

    async def matches() -> dict[str, Any] | None:
        obj = await kubectl.get(kind, name, namespace)
        status = seen[0] = (obj or {}).get("status") or {}
        return obj if all(status.get(k) == v for k, v in expected.items()) else None

    try:
        return await eventually(matches)
    except AssertionError:
        raise AssertionError(f"{kind}/{name} status never had {expected}: {seen[0]}") from None


async def object_when(
    kubectl: Kubectl, kind: str, name: str, namespace: str, type_: str, status: str
) -> dict[str, Any]:
    """The object once its condition `type_` has `status`: read the rest of its status from
    it, not from an earlier read (a status written apart from the pods and Jobs a test waits
    for, by the watcher, may come after them)."""

    async def holds() -> dict[str, Any] | None:
        found = await kubectl.get(kind, name, namespace)
        return found if condition(found, type_).get("status") == status else None

    return await eventually(holds)


async def condition_when(
    kubectl: Kubectl, kind: str, name: str, namespace: str, type_: str, status: str
) -> dict[str, Any]:
    return condition(await object_when(kubectl, kind, name, namespace, type_, status), type_)


async def job_when(kubectl: Kubectl, namespace: str, name: str, *, suspended: bool) -> Any:
    async def check() -> dict[str, Any] | None:
        job = await kubectl.get("Job", name, namespace)
        return job if job is not None and job["spec"]["suspend"] is suspended else None

    return await eventually(check)


async def pods_bound(kubectl: Kubectl, namespace: str, names: list[str]) -> list[str]:
    """The nodes of `names`, once each is bound."""

    async def bound() -> list[str] | None:
        nodes = [
            (await kubectl.get("Pod", n, namespace) or {}).get("spec", {}).get("nodeName")
            for n in names
        ]
        return [str(n) for n in nodes] if all(nodes) else None

    return await eventually(bound)
