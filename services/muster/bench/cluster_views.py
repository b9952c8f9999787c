"""`muster bench clusters`: what a Visibility.Clusters call costs the gateway at 5 000 and 50 000
nodes, and what a beating cluster costs it while the dashboard looks.

A gateway process on a loopback nats-server; this process puts one cluster's heartbeats as
gang-permit does (`RoomWriter`, nodes of `decode.heartbeat_cluster`'s pools: 20 labels each,
in parts past 1 MiB) and calls. Rows: each cluster's totals (`without_nodes`, the summary
`muster clusters` and the dashboard show), a page of 100 nodes, and the totals again after a
heartbeat that changed one node: wall (median) and the gateway's CPU per call. Then the
cluster beats BEATS_PER_S times a second, one node changed each time, for BEATING_S, with no
caller, then while one asks for the totals once a second: the gateway's CPU per second.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Final

import grpc
import msgspec

from muster.bench.decode import heartbeat_cluster
from muster.bench.gateway import gateway_process
from muster.bench.table import Column, number, render_table
from muster.bus import BusConfig, connect
from muster.bus.buckets import CLUSTERS_BUCKET
from muster.bus.kv import Bucket
from muster.bus.service import run_loop
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.core.dispatch import ClusterCapacity
from muster.core.heartbeat_parts import Heartbeat, encode_room
from muster.gangpermit.room_writer import RoomWriter
from muster.launcher.cpu_time import cpu_s

SECTION: Final = "clusters"
SIZES: Final = (5_000, 50_000)
CALLS: Final = 15
PAGE: Final = 100
BEATS_PER_S: Final = 4
BEATING_S: Final = 10.0
CLUSTER: Final = "big"


class ClustersRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    nodes: int
    parts: int  # what the heartbeat is put in (0: one value)
    case: str
    wall_ms: float  # per call, median; 0 for the beating case
    gateway_ms: float  # the gateway's CPU per call, or per second while beating


class _Beats:
    """One cluster's heartbeats, each changing one node's free cpu."""

    def __init__(self, kv: Bucket, nodes: int, *, max_bytes: int) -> None:
        self.kv, self.max_bytes = kv, max_bytes
        capacity = heartbeat_cluster(nodes)
        by_name = tuple(sorted(capacity.nodes, key=lambda n: n.name))  # as gang-permit puts them
        self.capacity = msgspec.structs.replace(capacity, cluster=CLUSTER, nodes=by_name)
        self.writer = RoomWriter(CLUSTER)
        self.last: Heartbeat | None = None
        self.count = 0

    async def beat(self, *, change: bool = True) -> None:
        if change:
            nodes = self.capacity.nodes
            i = (self.count * 7919) % len(nodes)
            node = nodes[i]
            busy = msgspec.structs.replace(node, free={**node.free, "cpu": self.count % 8 * 1000})
            self.capacity = ClusterCapacity(
                cluster=CLUSTER, nodes=(*nodes[:i], busy, *nodes[i + 1 :]), placed=()
            )
            self.count += 1
        self.last = encode_room(self.capacity, max_bytes=self.max_bytes, last=self.last)
        await self.writer.write(self.kv, self.last)


async def _per_call(
    pid: int, call: Callable[[], Awaitable[object]], *, before: Callable[[], Awaitable[None]]
) -> tuple[float, float]:
    """(median wall ms, the gateway's mean CPU ms) of CALLS calls, `before` each."""
    walls, cpu = [], 0.0
    for _ in range(CALLS):
        await before()
        started, used = time.perf_counter(), cpu_s(pid)
        await call()
        walls.append(time.perf_counter() - started)
        cpu += cpu_s(pid) - used
    return round(statistics.median(walls) * 1000, 2), round(cpu * 1000 / CALLS, 2)


async def _run(sizes: list[int], *, beating_s: float) -> list[ClustersRow]:
    """Every case at each size of `sizes`: one cluster, reported again at each size."""
    rows: list[ClustersRow] = []
    with tempfile.TemporaryDirectory(prefix="muster-bench-clusters-") as tmp:
        async with gateway_process(Path(tmp), tokens=False) as (pid, address, nats):
            bus = await connect(BusConfig(url=nats.url, name="muster-bench"))
            try:
                kv = await bus.kv(CLUSTERS_BUCKET)
                async with grpc.aio.insecure_channel(address) as channel:
                    stub = services_pb2_grpc.VisibilityStub(channel)
                    for nodes in sizes:
                        beats = _Beats(kv, nodes, max_bytes=bus.nc.max_payload)
                        await beats.beat(change=False)
                        rows += await _cases(pid, stub, beats, for_s=beating_s)
            finally:
                await bus.close()
    return rows


async def _cases(
    pid: int, stub: services_pb2_grpc.VisibilityStub, beats: _Beats, *, for_s: float
) -> list[ClustersRow]:
    totals = services_pb2.ClustersRequest(without_nodes=True)
    page = services_pb2.ClustersRequest(cluster=CLUSTER, limit=PAGE)

    async def nothing() -> None:
        pass

    await stub.Clusters(totals)  # the gateway's first call: its book, its bucket
    cases = {
        "totals": (lambda: stub.Clusters(totals), nothing),
        f"page of {PAGE}": (lambda: stub.Clusters(page), nothing),
        "totals after a beat of one node": (lambda: stub.Clusters(totals), beats.beat),
    }
    parts = len(beats.last.parts) if beats.last is not None else 0
    rows = []
    for case, (call, before) in cases.items():
        wall, gateway = await _per_call(pid, call, before=before)
        rows.append(ClustersRow(nodes=len(beats.capacity.nodes), parts=parts, case=case,
                                wall_ms=wall, gateway_ms=gateway))  # fmt: skip
    rows.extend([await _beating(pid, stub, beats, for_s=for_s, asking=a) for a in (False, True)])
    return rows


async def _beating(
    pid: int, stub: services_pb2_grpc.VisibilityStub, beats: _Beats, *, for_s: float, asking: bool
) -> ClustersRow:
    """The gateway's CPU ms per second while the cluster beats, and (`asking`) a caller asks
    for the totals each second."""
    totals = services_pb2.ClustersRequest(without_nodes=True)

    async def look() -> None:
        while True:
            await stub.Clusters(totals)
            await asyncio.sleep(1.0)

    used, started = cpu_s(pid), time.perf_counter()
    looking = asyncio.create_task(look() if asking else asyncio.sleep(for_s))
    try:
        while time.perf_counter() - started < for_s:
            await beats.beat()
            await asyncio.sleep(1 / BEATS_PER_S)
    finally:
        looking.cancel()
    per_s = (cpu_s(pid) - used) * 1000 / (time.perf_counter() - started)
    case = f"{BEATS_PER_S} beats/s, " + ("totals asked each second" if asking else "none asked")
    parts = len(beats.last.parts) if beats.last is not None else 0
    return ClustersRow(nodes=len(beats.capacity.nodes), parts=parts, case=case, wall_ms=0.0,
                       gateway_ms=round(per_s, 1))  # fmt: skip


def run(*, scale: float = 1.0) -> Iterator[ClustersRow]:
    beating_s = BEATING_S * min(1.0, max(0.025, scale))  # a small run beats for a moment
    sizes = [max(10, round(nodes * scale)) for nodes in SIZES]
    yield from run_loop(_run(sizes, beating_s=beating_s))


def render(rows: list[ClustersRow]) -> str:
    columns: list[Column[ClustersRow]] = [
        Column("nodes", lambda r: str(r.nodes)),
        Column("parts", lambda r: str(r.parts)),
        Column("case", lambda r: r.case),
        Column("wall ms/call", lambda r: number(r.wall_ms, digits=1) if r.wall_ms else "-"),
        Column("GATEWAY CPU ms/call (beating: ms/s)", lambda r: number(r.gateway_ms, digits=1)),
    ]
    return render_table(columns, rows)
