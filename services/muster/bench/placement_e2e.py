"""Placement end to end: pods created in the simulated cluster until bound, through NATS, the
gangpermit and binder service processes.

Each case starts a fresh loopback nats-server and the two service processes `muster run` starts
for placement (`gangpermit`, `binder`), writes the nodes into the sim cluster's store, then
creates every pod at once (64 writes in flight, as `kubectl apply` would, schedulerName
`muster`) and watches the store until each pod has its `spec.nodeName`. Pods placed on their
own, or in gangs of 3 (a scheduling.k8s.io Workload with a gang pod group each, created before
the clock starts). Throughput = pods bound / (last bind seen − first create started); latency
per pod = bind seen − its create started, on one host clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from muster.bench.table import Column, render_table
from muster.cluster.keys import POD_PREFIX
from muster.cluster.sim.backend import SimBackend
from muster.launcher.nats_server import NatsServer
from muster.launcher.stack import Stack

SECTION = "placement-e2e"
NAMESPACE = "bench"
IN_FLIGHT = 64
SERVICES = ("gangpermit", "binder")


class PlacementE2ERow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    nodes: int
    pods: int
    gang_size: int  # 1: pods placed on their own
    bound: int
    wall_s: float  # first create started -> last bind seen
    pods_per_s: float
    bound_p50_ms: float
    bound_p99_ms: float


def not_valid(row: PlacementE2ERow) -> str | None:
    """Why a row is not a measurement: pods left unbound make its rate and latencies those of
    the pods that were bound before the case gave up."""
    if row.bound == row.pods:
        return None
    missing = row.pods - row.bound
    return f"{row.nodes} nodes, gangs of {row.gang_size}: {missing} of {row.pods} pods never bound"


class Case(msgspec.Struct, frozen=True, kw_only=True):
    nodes: int
    pods: int
    gang_size: int = 1


CASES = (
    Case(nodes=100, pods=1000),
    Case(nodes=500, pods=1000),
    Case(nodes=500, pods=999, gang_size=3),
)


def node_manifest(n: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{n:04d}",
            "labels": {"kubernetes.io/hostname": f"node-{n:04d}"},
        },
        "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}},
    }


def gang_workload(g: int, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": f"gang-{g:05d}", "namespace": NAMESPACE},
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": size}}}]},
    }


def pod_manifest(i: int, gang_size: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "muster",
        "containers": [
            {"name": "main", "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}
        ],
    }
    if gang_size > 1:
        spec["workloadRef"] = {"name": f"gang-{i // gang_size:05d}", "podGroup": "workers"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i:05d}", "namespace": NAMESPACE},
        "spec": spec,
    }


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_case(case: Case, *, log_dir: Path | None = None) -> PlacementE2ERow:
    """One case on a fresh nats-server and fresh service processes."""
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="muster-bench-placement-"))
    nats = NatsServer(log_dir / "jetstream")
    url = await nats.start(log_path=log_dir / "nats-server.log")
    stack = Stack(
        nats_url=url, cluster="local", shards=1, speed=1.0, log_dir=log_dir, only=SERVICES
    )
    try:
        await stack.start()
        backend = await SimBackend.connect(url, cluster="local")
        try:
            return await _measure(backend, case)
        finally:
            await backend.close()
    finally:
        await stack.stop()
        await nats.stop()


async def _measure(backend: SimBackend, case: Case) -> PlacementE2ERow:
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def write(manifest: dict[str, Any]) -> None:
        async with limit:
            await backend.create(manifest)

    await asyncio.gather(*(write(node_manifest(n)) for n in range(case.nodes)))
    if case.gang_size > 1:
        gangs = case.pods // case.gang_size
        await asyncio.gather(*(write(gang_workload(g, case.gang_size)) for g in range(gangs)))
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    everything = asyncio.Event()

    async def watch() -> None:
        async for change in backend.store.watch(POD_PREFIX):
            name = change.obj.get("metadata", {}).get("name", "")
            if change.obj.get("spec", {}).get("nodeName") and name not in bound:
                bound[name] = time.monotonic()
                if len(bound) >= case.pods:
                    everything.set()

    async def create(i: int) -> None:
        manifest = pod_manifest(i, case.gang_size)
        async with limit:
            created[manifest["metadata"]["name"]] = time.monotonic()
            await backend.create(manifest)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.2)  # the watch is subscribed before the first pod
    await asyncio.gather(*(create(i) for i in range(case.pods)))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(everything.wait(), 60 + case.pods / 50)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    latencies_ms = [(bound[name] - t) * 1000 for name, t in created.items() if name in bound]
    start = min(created.values())
    wall_s = (max(bound.values(), default=start) - start) or 1e-9
    return PlacementE2ERow(
        nodes=case.nodes,
        pods=case.pods,
        gang_size=case.gang_size,
        bound=len(latencies_ms),
        wall_s=round(wall_s, 3),
        pods_per_s=round(len(latencies_ms) / wall_s, 1),
        bound_p50_ms=round(percentile(latencies_ms, 0.50), 1),
        bound_p99_ms=round(percentile(latencies_ms, 0.99), 1),
    )


def run(*, scale: float = 1.0, cases: Sequence[Case] = CASES) -> Iterator[PlacementE2ERow]:
    """Every case (pods scaled by `scale`, at least one gang), one row each as it finishes."""
    for case in cases:
        pods = max(case.gang_size, round(case.pods * scale) // case.gang_size * case.gang_size)
        yield asyncio.run(run_case(msgspec.structs.replace(case, pods=pods)))


def render(rows: list[PlacementE2ERow]) -> str:
    columns: list[Column[PlacementE2ERow]] = [
        Column("NODES", lambda r: str(r.nodes)),
        Column("PODS", lambda r: str(r.pods)),
        Column("GANG", lambda r: str(r.gang_size)),
        Column("BOUND", lambda r: str(r.bound)),
        Column("WALL s", lambda r: f"{r.wall_s:g}"),
        Column("PODS/s", lambda r: f"{r.pods_per_s:g}"),
        Column("BOUND p50 ms", lambda r: f"{r.bound_p50_ms:g}"),
        Column("BOUND p99 ms", lambda r: f"{r.bound_p99_ms:g}"),
    ]
    return render_table(columns, rows)
