"""The simulated cluster's garbage collector against a real nats-server: `muster service
sim-cluster` deletes the pods of deleted workloads, as Kubernetes' garbage collector does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from muster.bus import Bus
from muster.bus.envelope import new_event
from muster.bus.service import Health
from muster.cluster import PodSetStart
from muster.cluster.sim import SimBackend, SimStore, pod_key
from muster.cluster.sim.__main__ import serve
from muster.contracts.v1 import events_pb2

pytestmark = pytest.mark.timeout(60)

N = 8  # workloads run, finished and deleted


@pytest.fixture
async def sim(bus: Bus) -> SimBackend:
    backend = SimBackend(await SimStore.open(bus.kv, cluster="local"))
    await backend.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    return backend


@contextlib.asynccontextmanager
async def sim_cluster_service(bus: Bus, **options: Any) -> AsyncIterator[None]:
    """`muster service sim-cluster` (kubelet and collector) while the block runs; `options`
    go to its `serve`."""
    service = serve(bus, Health("sim-cluster"), cluster="local", speed=1000, **options)
    task = asyncio.create_task(service)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def started(sim: SimBackend, name: str, *, admission: int) -> str:
    """Workload ml/<name> admitted at `admission`: its one pod made and bound, as the binder
    does; the pod's key."""
    start = PodSetStart(
        name="main", count=1, requests={"cpu": 100}, annotations={"muster.dev/run-seconds": "1"}
    )
    await sim.start_workload(f"ml/{name}", pod_sets=[start], admission=admission)
    await sim.bind("ml", f"{name}-main-0", "n1")
    return pod_key("ml", f"{name}-main-0")


async def deleted(bus: Bus, *names: str) -> int:
    """Publish `workload.deleted` of each, as the gateway's Delete does; the last sequence."""
    sequence = 0
    for name in names:
        env = new_event("deleted", events_pb2.WorkloadDeleted(), cluster="local",
                        workload=f"ml/{name}", source="gateway")  # fmt: skip
        sequence = await bus.publish(env)
    return sequence


async def until(
    store: SimStore, keys: set[str], *, phase: str = "", gone_after: int | None = None
) -> None:
    """Until every pod of `keys` is in `phase`, or with `gone_after` (a store revision), deleted
    after that revision; by the store's watch."""
    waiting, gone = set(keys), gone_after is not None
    watch = store.watch("pod.", from_revision=gone_after or 0)
    async with asyncio.timeout(30), contextlib.aclosing(watch) as changes:
        async for change in changes:
            if change.key not in waiting:
                continue
            if (change.type == "DELETED") if gone else (
                change.type != "DELETED" and change.obj["status"]["phase"] == phase
            ):  # fmt: skip
                waiting.discard(change.key)
            if not waiting:
                return


async def pods_stored(store: SimStore) -> set[str]:
    """The pod keys the bucket holds with a value (a deleted one is a tombstone)."""
    return {p.key for p in await store.list("pod.")}


async def test_deleting_finished_workloads_deletes_their_pods_and_a_live_ones_stay(
    bus: Bus, sim: SimBackend
) -> None:
    admission = await deleted(bus, "before-any")  # a sequence for the admissions below
    names = [f"w-{i}" for i in range(N)]
    gone = {await started(sim, name, admission=admission) for name in names}
    live = await started(sim, "live", admission=admission)
    async with sim_cluster_service(bus):
        await until(sim.store, {*gone, live}, phase="Succeeded")  # every workload finished

        revision = await sim.store.last_revision()
        await deleted(bus, *names)
        await until(sim.store, gone, gone_after=revision)

        # The live Job's finished pod stays until it is deleted: all the bucket holds now.
        assert await pods_stored(sim.store) == {live}
        assert (await sim.store.get(live)).obj["status"]["phase"] == "Succeeded"  # type: ignore[union-attr]


async def test_a_restarted_collector_catches_a_late_pod_and_spares_a_name_used_again(
    bus: Bus, sim: SimBackend
) -> None:
    admission = await deleted(bus, "before-any")
    # While the service is down: w-late's pod is made after its deletion was stored (a start
    # that raced the delete); w-again is deleted, then submitted and admitted again.
    await deleted(bus, "late", "again")
    late = await started(sim, "late", admission=admission)
    readmitted = await deleted(bus, "unrelated")  # a sequence after the deletion of w-again
    again = await started(sim, "again", admission=readmitted)

    revision = await sim.store.last_revision()
    async with sim_cluster_service(bus):
        await until(sim.store, {late}, gone_after=revision)
        # The watch showed w-again's pod before w-late's (revision order): seen and spared.
        assert await pods_stored(sim.store) == {again}
