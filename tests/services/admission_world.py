"""Helpers for the admission and preemption service tests: manifests, events, running services.

Services run in-process as asyncio tasks, each on its own NATS connection, so that cancelling
one (a crash, as far as NATS is concerned) leaves the test's own `bus` alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import nats.js.errors
from budget import wait_s
from nats.js import api

from muster.admission.service import AdmissionConfig, run_admission
from muster.admission.snapshot import sequence_in
from muster.bus import EVENTS_STREAM, Bus, BusConfig, connect, new_event
from muster.bus.buckets import SNAPSHOTS_BUCKET
from muster.bus.partitions import partition_of
from muster.bus.service import Health
from muster.contracts.v1 import events_pb2 as pb
from muster.preemption.service import PreemptionConfig, run_preemption

KUEUE = "kueue.x-k8s.io/v1beta2"


def flavor(name: str = "default", **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": labels} if labels else {}
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(
    name: str = "cq",
    *,
    cpu: str = "4",
    gpu: str | None = None,
    flavor_name: str = "default",
    cohort: str | None = None,
    preemption: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ClusterQueue with one flavor: `cpu`, and `gpu` (nvidia.com/gpu) when given."""
    quotas = {"cpu": cpu, **({"nvidia.com/gpu": gpu} if gpu is not None else {})}
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(quotas),
                "flavors": [
                    {
                        "name": flavor_name,
                        "resources": [{"name": r, "nominalQuota": q} for r, q in quotas.items()],
                    }
                ],
            }
        ],
    }
    if cohort:
        spec["cohort"] = cohort
    if preemption:
        spec["preemption"] = preemption
    meta: dict[str, Any] = {"name": name, **({"annotations": annotations} if annotations else {})}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": meta, "spec": spec}


def admission_check(name: str = "prov") -> dict[str, Any]:
    """An AdmissionCheck of an external controller (its answers are the test's to publish)."""
    return {
        "apiVersion": KUEUE,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": f"example.com/{name}"},
    }


def local_queue(name: str = "lq", *, namespace: str = "ns", cq: str = "cq") -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def workload(
    name: str, *, cpu: str = "1", gpu: int = 0, count: int = 1, queue: str = "lq",
    namespace: str = "ns", priority: int | None = None, annotations: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    requests: dict[str, Any] = {"cpu": cpu, **({"nvidia.com/gpu": gpu} if gpu else {})}
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [
            {
                "name": "main",
                "count": count,
                "template": {
                    "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}
                },
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            **({"annotations": annotations} if annotations else {}),
        },
        "spec": spec,
    }


def config_applied(manifest: dict[str, Any], *, cluster: str = "local") -> pb.Envelope:
    meta = manifest["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
    payload = pb.ConfigApplied(kind=manifest["kind"], name=name, manifest_json=json.dumps(manifest))
    return new_event("config_applied", payload, cluster=cluster, source="test")


def config_deleted(kind: str, name: str, *, cluster: str = "local") -> pb.Envelope:
    payload = pb.ConfigDeleted(kind=kind, name=name)
    return new_event("config_deleted", payload, cluster=cluster, source="test")


def submitted(manifest: dict[str, Any], *, cluster: str = "local") -> pb.Envelope:
    meta = manifest["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    payload = pb.WorkloadSubmitted(
        manifest_json=json.dumps(manifest), queue_name=manifest["spec"].get("queueName", "")
    )
    return new_event("submitted", payload, cluster=cluster, workload=key, source="test")


def fact(field: str, key: str, payload: Any = None, *, cluster: str = "local") -> pb.Envelope:
    """A fact about workload `key` (finished, deleted, eviction_completed, pods_ready, ...)."""
    message = payload if payload is not None else getattr(pb.Envelope(), field).__class__()
    return new_event(field, message, cluster=cluster, workload=key, source="test")


def in_partition(env: pb.Envelope, partition: int) -> pb.Envelope:
    """`env` as the gateway or the watcher publishes it: naming its LocalQueue's partition."""
    env.partition = str(partition)
    return env


def trees(shards: int = 2) -> tuple[str, ...]:
    """Cohorts whose partitions `shards` shards decide apart: the i-th, shard i's."""
    names = [f"team-{i}" for i in range(50)]
    by_shard = {partition_of(f"cohort/{n}") % shards: n for n in names}
    return tuple(by_shard[i] for i in range(shards))


async def publish(bus: Bus, *envs: pb.Envelope) -> None:
    for env in envs:
        await bus.publish(env)


async def basic_config(
    bus: Bus, *, cpu: str = "4", preemption: dict[str, Any] | None = None
) -> None:
    await publish(
        bus,
        config_applied(flavor()),
        config_applied(cluster_queue(cpu=cpu, preemption=preemption)),
        config_applied(local_queue()),
    )


class Running:
    """One service running as a task on its own connection."""

    def __init__(self, task: asyncio.Task[None], health: Health, bus: Bus) -> None:
        self.task = task
        self.health = health
        self.bus = bus

    async def wait_serving(self, timeout_s: float | None = None) -> None:
        """Until it serves (at most `timeout_s`; None: what is left of the test's time)."""
        async with asyncio.timeout(wait_s(timeout_s)):
            while not self.health.serving:
                if self.task.done():
                    self.task.result()
                    raise AssertionError("service ended before serving")
                await asyncio.sleep(0.01)

    async def kill(self) -> None:
        """Cancel the task abruptly and drop the connection without draining."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task
        await self.bus.nc.close()

    async def stop(self) -> None:
        await self.kill()


# The shard lease's TTL here. `kill` cancels a replica, which gives its lease up on the way
# out (`run_admission`), so a successor takes over within one poll whatever the TTL: the TTL
# only bounds how long a loaded test process may go without renewing. With 2 s, one that did
# not renew for 1.5 s (load ~40 on 2 cores) lost it (LeaseLostError) and stopped deciding
# (now it steps down and campaigns again: test_admission_lease_lost.py; a rebuild still costs).
LEASE_TTL_S = 60.0
UNEXPIRING_LEASE_S = 600.0  # for a test that restarts no replica


async def start_admission(bus_config: BusConfig, **settings: Any) -> Running:
    bus = await connect(msgspec_replace(bus_config, name="muster-admission-test"))
    health = Health("admission")
    defaults = {"lease_ttl_s": LEASE_TTL_S, "lease_renew_s": 0.5, "ack_wait_s": 2.0}
    config = AdmissionConfig(**{**defaults, **settings})
    task = asyncio.create_task(run_admission(bus, health, config))
    return Running(task, health, bus)


async def start_preemption(bus_config: BusConfig, **settings: Any) -> Running:
    bus = await connect(msgspec_replace(bus_config, name="muster-preemption-test"))
    health = Health("preemption")
    task = asyncio.create_task(run_preemption(bus, health, PreemptionConfig(**settings)))
    return Running(task, health, bus)


def msgspec_replace(config: BusConfig, **changes: Any) -> BusConfig:
    import msgspec

    return msgspec.structs.replace(config, **changes)


@contextlib.asynccontextmanager
async def running(*services: Running) -> AsyncIterator[Sequence[Running]]:
    try:
        yield services
    finally:
        for svc in services:
            await svc.stop()


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout_s: float | None = None
) -> None:
    """Wait until `check()` holds: state in NATS (a bucket, a consumer) or in another task
    (at most `timeout_s`; None: what is left of the test's time, `tests/budget.py`)."""
    async with asyncio.timeout(wait_s(timeout_s)):
        while not await check():  # noqa: ASYNC110 (the state lives in the server: poll it)
            await asyncio.sleep(0.02)


def count(events: Any, event_type: str, workload: str) -> int:
    return len(events.matching(event_type, workload=workload))


async def durable_info(bus: Bus, durable: str) -> api.ConsumerInfo:
    """Durable `durable` of MUSTER_EVENTS; for a shard's name (`admission-<i>`), its term's
    (`admission-<i>-<term>-<owner>`: admission/takeover.py `term_durable`), the newest made
    when a lapsed holder's is there too. NotFoundError when there is none."""
    try:
        info: api.ConsumerInfo = await bus.js.consumer_info(EVENTS_STREAM, durable)
        return info
    except nats.js.errors.NotFoundError:
        if not re.fullmatch(r"admission-\d+", durable):
            raise
    terms = [
        info
        for info in await bus.js.consumers_info(EVENTS_STREAM)
        if re.fullmatch(rf"{durable}-\d+-[0-9a-f]{{4}}", info.name)
    ]
    if not terms:
        raise nats.js.errors.NotFoundError
    return max(terms, key=lambda info: str(info.created or ""))


async def drained(bus: Bus, durable: str, *, timeout_s: float | None = None) -> None:
    """Wait until durable consumer `durable` has handled and acked everything stored so far.

    A consumer that does not exist is not drained yet: an admission replica makes its own anew
    at each rebuild (a restart, a partition moved to or from it)."""

    last: list[str] = ["nothing"]

    async def done() -> bool:
        try:
            info = await durable_info(bus, durable)
        except nats.js.errors.NotFoundError:
            last[0] = "no such consumer (being made anew)"
            return False
        last[0] = f"{info.num_pending} pending, {info.num_ack_pending} unacked, {info.delivered}"
        return not info.num_pending and not info.num_ack_pending

    bound = wait_s(timeout_s)
    try:
        await eventually(done, timeout_s=bound)
    except TimeoutError:
        raise AssertionError(f"{durable} not drained after {bound:.1f}s: {last[0]}") from None


class FakeBinder:
    """Consumes cmd.evict and answers eviction_completed (or stays silent when `mute`)."""

    def __init__(self, bus: Bus, *, mute: bool = False) -> None:
        self.bus = bus
        self.mute = mute
        self.commands: list[pb.Envelope] = []
        self.changed = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None

    async def wait_for(
        self, check: Callable[[list[pb.Envelope]], bool], timeout_s: float = 10
    ) -> None:
        """Wait until `check(commands)` holds."""
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: check(self.commands)), timeout_s)

    async def handle(self, env: pb.Envelope) -> None:
        async with self.changed:
            self.commands.append(env)
            self.changed.notify_all()
        if not self.mute:
            done = new_event(
                "eviction_completed",
                pb.EvictionCompleted(),
                cluster=env.cluster,
                workload=env.workload,
                cause=env,
                source="binder",
            )
            await self.bus.publish(done)

    def start(self) -> FakeBinder:
        from muster.bus import COMMANDS_STREAM, command_subject

        self.task = asyncio.create_task(
            self.bus.consume(
                "fake-binder", [command_subject("*", "evict")], self.handle, stream=COMMANDS_STREAM
            )
        )
        return self

    async def stop(self) -> None:
        while self.task is not None and not self.task.done():  # see `events` for why a loop
            self.task.cancel()
            await asyncio.wait({self.task}, timeout=0.5)


async def snapshot_sequence(bus: Bus, name: str = "admission-0") -> int | None:
    """The sequence of snapshot `name` in MUSTER_SNAPSHOTS, or None when there is none."""
    try:
        bucket = await bus.js.object_store(SNAPSHOTS_BUCKET)
        info = await bucket.get_info(name)
    except nats.js.errors.NotFoundError:  # no bucket, or no such object
        return None
    stream = await bus.js.stream_info(EVENTS_STREAM)
    return sequence_in(info.headers, stream=stream.created.isoformat() if stream.created else "")


async def snapshot_written(
    bus: Bus, *, at_least: int, name: str = "admission-0", timeout_s: float = 10.0
) -> None:
    """Wait until snapshot `name` accounts for every event up to sequence `at_least`."""

    async def written() -> bool:
        return (await snapshot_sequence(bus, name) or 0) >= at_least

    await eventually(written, timeout_s=timeout_s)
