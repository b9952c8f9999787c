"""A workload whose manifest is too large to be copied into its `admitted` (over 256 KiB),
admitted after its `submitted` left MUSTER_EVENTS, meets a binder restarted since: it starts
from the manifest the binders kept in MUSTER_MANIFESTS, or, when none was kept, it is ended
with the reason, never held admitted for ever (docs/events.md, "Manifests too large for their
admission").

The `submitted` leaves the stream by a purge: what 7 days (MUSTER_EVENTS' max age) or 10 GiB
of later events do in production, without waiting for either.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from bus_helpers import EventLog
from placement_stack import CLUSTER, Stack, node, placement_stack, workload_manifest

from muster.bus import EVENTS_STREAM, Bus, new_event
from muster.bus.buckets import MANIFESTS_BUCKET
from muster.bus.objects import ObjectBucket
from muster.cluster.backend import WorkloadOrigin
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.store import SimStore
from muster.contracts.v1 import events_pb2
from muster.payloads import MANIFEST_COPY_LIMIT

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def stack(bus: Bus, events: EventLog) -> AsyncIterator[Stack]:
    async with placement_stack(bus, events) as s:
        await s.backend.apply(node("a"))
        yield s


def big_manifest(name: str) -> str:
    """A one-pod Workload whose manifest is over the copy limit (a long environment value)."""
    doc = workload_manifest(name, count=1, run_seconds="30")
    (container,) = doc["spec"]["podSets"][0]["template"]["spec"]["containers"]
    container["env"] = [{"name": "NOTES", "value": "n" * (MANIFEST_COPY_LIMIT + 1)}]
    return json.dumps(doc)


async def submitted(stack: Stack, key: str, manifest: str) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadSubmitted(manifest_json=manifest, queue_name="main")
    return await stack.publish("submitted", payload, workload=key)


async def admitted_without_copy(stack: Stack, key: str, submitted_id: str) -> None:
    """What admission publishes for a manifest over the limit: no copy of it."""
    assignment = events_pb2.PodSetAssignment(name="main", count=1, flavors={"cpu": "default"})
    admission = events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    payload = events_pb2.WorkloadAdmitted(admission=admission)
    env = new_event("admitted", payload, cluster=CLUSTER, workload=key, source="test")
    env.submitted_id = submitted_id
    await stack.bus.publish(env)


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 10.0) -> None:
    """Wait for `check` (the bucket tells no event to wait for: it is polled)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"not {what} within {timeout_s} s"
        await asyncio.sleep(0.05)


async def kept_ids(bus: Bus) -> dict[str, list[str]]:
    objects = await ObjectBucket(bus.js, MANIFESTS_BUCKET.format(cluster=CLUSTER)).list()
    return {o.name: o.headers.get("Muster-Submitted-Id", []) for o in objects}


async def restart_after_the_stream_lost_it(stack: Stack) -> None:
    """The binder and gang-permit restarted: each replays what is left, nothing about it."""
    await stack.stop("binder")
    await stack.stop("gangpermit")
    await stack.bus.js.purge_stream(EVENTS_STREAM)
    await stack.start_gangpermit()
    await stack.start_binder()


async def test_a_big_workload_admitted_after_its_submitted_left_starts_from_the_kept_manifest(
    stack: Stack,
) -> None:
    key = "ns/big"
    sub = await submitted(stack, key, big_manifest("big"))

    async def kept() -> bool:
        return (await kept_ids(stack.bus)).get(key) == [sub.event_id]

    await until(kept, "kept by the binder")
    await restart_after_the_stream_lost_it(stack)
    await admitted_without_copy(stack, key, sub.event_id)

    # Gang-permit, without a spec, places all its admitted pods once the binder made them.
    await stack.events.wait_for("gang_permitted", workload=key, timeout_s=15)
    await stack.events.wait_for("running", workload=key, timeout_s=15)
    assert [p.node_name for p in await stack.pods_of(key)] == ["a"]
    assert stack.events.matching("finished", workload=key) == []

    # Kept for as long as the workload lives: its end removes it.
    await stack.publish("finished", events_pb2.WorkloadFinished(succeeded=True), workload=key)

    async def removed() -> bool:
        return key not in await kept_ids(stack.bus)

    await until(removed, "removed at its end")


async def test_a_small_workload_is_not_kept(stack: Stack) -> None:
    """Its admission carries its copy: the bucket holds only what no admission can carry."""
    await submitted(stack, "ns/small", json.dumps(workload_manifest("small", count=1)))
    big = await submitted(stack, "ns/big", big_manifest("big"))

    async def big_kept() -> bool:
        return "ns/big" in await kept_ids(stack.bus)

    await until(big_kept, "the big one kept")  # kept after the small one was followed
    assert await kept_ids(stack.bus) == {"ns/big": [big.event_id]}


async def test_a_big_workload_no_binder_kept_is_ended_with_the_reason_not_held_for_ever(
    stack: Stack,
) -> None:
    """Submitted while no binder ran (or before binders kept manifests), gone before one did:
    the binder ends it, so that admission frees its quota; it never starts."""
    key = "ns/lost"
    await stack.stop("binder")
    sub = await submitted(stack, key, big_manifest("lost"))
    await stack.bus.js.purge_stream(EVENTS_STREAM)
    await stack.start_binder()
    await admitted_without_copy(stack, key, sub.event_id)

    finished = await stack.events.wait_for("finished", workload=key, timeout_s=15)
    assert finished.source == f"binder/{CLUSTER}"
    assert not finished.finished.succeeded
    assert f"{key} cannot be started: its manifest is no longer known" in (
        finished.finished.message
    )
    assert finished.submitted_id == sub.event_id
    assert await stack.pods_of(key) == []


async def test_a_kept_manifest_of_an_earlier_life_of_the_name_starts_nothing(
    stack: Stack,
) -> None:
    """The bucket holds the name's earlier submission (its removal not made): an admission of
    a later one, whose own manifest is gone, is not started from it but ended."""
    key = "ns/again"
    first = await submitted(stack, key, big_manifest("again"))

    async def kept() -> bool:
        return (await kept_ids(stack.bus)).get(key) == [first.event_id]

    await until(kept, "kept by the binder")
    await stack.stop("binder")
    later = await submitted(stack, key, big_manifest("again"))  # no binder saw this one
    await stack.bus.js.purge_stream(EVENTS_STREAM)
    await stack.start_binder()
    await admitted_without_copy(stack, key, later.event_id)

    finished = await stack.events.wait_for("finished", workload=key, timeout_s=15)
    assert not finished.finished.succeeded
    assert await stack.pods_of(key) == []


MANAGER = "manager"  # the MultiKueue manager cluster the Job was submitted in


# The owners whose Workload is copied with their manifest: (apiVersion, kind).
JOB = ("batch/v1", "Job")
JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")
either_owner = pytest.mark.parametrize("owner", [JOB, JOBSET], ids=["job", "jobset"])


def jobs_workload(name: str, owner: tuple[str, str] = JOB) -> str:
    """The Workload of Job (or `owner`) `name`, its controller, small enough to be copied."""
    doc = workload_manifest(name, count=1, run_seconds="30")
    api_version, kind = owner
    doc["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u1", "controller": True}
    ]
    return json.dumps(doc)


def big_job(name: str, owner: tuple[str, str] = JOB) -> str:
    """Its Job (or `owner`), over the copy limit."""
    notes = {"notes": "n" * (MANIFEST_COPY_LIMIT + 1)}
    meta = {"name": name, "namespace": "ns", "annotations": notes}
    api_version, kind = owner
    return json.dumps({"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": {}})


class CopiesSeen(SimBackend):
    """The sim cluster, noting what each start copies from another cluster (the sim itself
    needs no copy: its pods stand on their own)."""

    def __init__(self, backend: SimBackend) -> None:
        super().__init__(backend.store)
        self.origins: dict[str, WorkloadOrigin | None] = {}

    async def start_workload(
        self, workload_key: str, *, origin: WorkloadOrigin | None = None, **rest: Any
    ) -> None:
        self.origins[workload_key] = origin
        await super().start_workload(workload_key, origin=origin, **rest)


async def dispatched_without_its_job(
    stack: Stack, key: str, submitted_id: str, owner: tuple[str, str] = JOB
) -> None:
    """What the manager's admission publishes for this worker: the Workload copied, its Job
    (over the limit) not."""
    assignment = events_pb2.PodSetAssignment(name="main", count=1, flavors={"cpu": "default"})
    admission = events_pb2.Admission(cluster_queue="cq", pod_set_assignments=[assignment])
    payload = events_pb2.WorkloadAdmitted(
        admission=admission, manifest_json=jobs_workload("train", owner), origin_cluster=MANAGER
    )
    env = new_event("admitted", payload, cluster=CLUSTER, workload=key, source="test")
    env.submitted_id = submitted_id
    await stack.bus.publish(env)


async def submitted_in_the_manager(
    stack: Stack, key: str, owner: tuple[str, str] = JOB
) -> events_pb2.Envelope:
    payload = events_pb2.WorkloadSubmitted(
        manifest_json=jobs_workload("train", owner), owner_manifest_json=big_job("train", owner)
    )
    env = new_event("submitted", payload, cluster=MANAGER, workload=key, source="test")
    await stack.bus.publish(env)
    return env


@either_owner
async def test_a_copy_whose_job_is_too_big_to_copy_starts_with_the_kept_job(
    stack: Stack, owner: tuple[str, str]
) -> None:
    """Its Workload is copied into the admission, its Job (JobSet) is not: the binder restarted
    after the `submitted` left takes it from MUSTER_MANIFESTS, never starts a bare Workload."""
    key = "ns/train"
    sub = await submitted_in_the_manager(stack, key, owner)

    async def kept() -> bool:
        return (await kept_ids(stack.bus)).get(key) == [sub.event_id]

    await until(kept, "kept by the binder")
    await stack.stop("binder")
    await stack.bus.js.purge_stream(EVENTS_STREAM)
    seen = CopiesSeen(stack.backend)
    await stack.start_binder(seen)
    await dispatched_without_its_job(stack, key, sub.event_id, owner)

    await stack.events.wait_for("running", workload=key, timeout_s=15)
    origin = seen.origins[key]
    assert origin is not None
    assert (origin.cluster, origin.owner_json) == (MANAGER, big_job("train", owner))


async def test_a_copy_whose_job_no_binder_kept_is_ended_with_the_reason_not_started_bare(
    stack: Stack,
) -> None:
    key = "ns/train"
    await stack.stop("binder")
    sub = await submitted_in_the_manager(stack, key)
    await stack.bus.js.purge_stream(EVENTS_STREAM)
    await stack.start_binder()
    await dispatched_without_its_job(stack, key, sub.event_id)

    finished = await stack.events.wait_for("finished", workload=key, timeout_s=15)
    assert (finished.source, finished.submitted_id) == (f"binder/{CLUSTER}", sub.event_id)
    assert not finished.finished.succeeded
    assert finished.finished.message.startswith(
        f"{key} cannot be started: its Job's manifest is no longer known"
    )
    assert await stack.pods_of(key) == []


@contextlib.asynccontextmanager
async def binder_process(nats_url: str, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """`muster service binder` of the sim cluster as a real process, killed at the end."""
    with log.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "muster.cli.main", "service", "binder", "--nats", nats_url,
            "--cluster", CLUSTER, "--cluster-backend", "sim", "--health-port", "0",
            stdout=asyncio.subprocess.PIPE, stderr=stderr,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.startswith(b"health: "), f"binder did not start: see {log}"
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_sigkilled_binder_process_starts_it_from_the_kept_manifest(
    bus: Bus, events: EventLog, nats_server: str, tmp_path: Path
) -> None:
    """As above, with `muster service binder` killed by SIGKILL between the `submitted` and
    the purge: the manifest was kept as it was followed, not at shutdown."""
    key, log = "ns/killed", tmp_path / "binder.log"
    pods = SimBackend(await SimStore.open(bus.kv, cluster=CLUSTER))
    async with binder_process(nats_server, log) as first:
        payload = events_pb2.WorkloadSubmitted(manifest_json=big_manifest("killed"))
        sub = new_event("submitted", payload, cluster=CLUSTER, workload=key, source="test")
        await bus.publish(sub)

        async def kept() -> bool:
            return (await kept_ids(bus)).get(key) == [sub.event_id]

        await until(kept, "kept by the binder", timeout_s=30)
        first.send_signal(signal.SIGKILL)
        assert await first.wait() == -signal.SIGKILL
    await bus.js.purge_stream(EVENTS_STREAM)

    async with binder_process(nats_server, log):
        stack = Stack(bus=bus, backend=pods, events=events)
        await admitted_without_copy(stack, key, sub.event_id)

        async def started() -> bool:
            return len(await stack.pods_of(key)) == 1

        await until(started, "its pod created", timeout_s=30)
