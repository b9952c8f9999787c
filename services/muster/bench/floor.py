"""`muster bench floor`: what muster's I/O per workload costs with none of muster's logic.

`bench e2e`'s burst of one workload per Submit costs muster 3.1-3.4 CPU ms per workload summed
over its processes (docs/benchmarks.md). The floor is the part of it that the transport alone
charges: stand-ins for the six services (`bench.floor_roles`), each a process of its own in a
session of its own as the launcher starts them, on the same kind of loopback nats-server, doing
per workload exactly the I/O their service does in that burst (`bench.floor_wire`, today's
layout: a gRPC Submit, six stored messages each awaiting its PubAck, the `submitted` being
the name's claim, no `bound` for the pod made on its node, thirteen deliveries to the same
readers) and decoding what they receive, but deciding nothing. The client is `bench e2e`'s: the
same manifests, 64 calls in flight, the same wait for every workload's `admitted` and
`running`. CPU = user + system time of each process over the burst, per workload.

With `--with-e2e`, each floor run is followed by `bench e2e`'s burst case (1 shard, one per
Submit, the same workload count; YAML manifests, or JSON with `--manifest json`, as the floor's
client sends), so that the two are measured in the same period; the last table gives, per
process, the floor's share of muster's CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Final

import grpc
import msgspec
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext, api

from muster.bench import connz, e2e
from muster.bench import floor_wire as wire
from muster.bench.floor_roles import ADMISSION_DURABLE, BINDER_DURABLE, ROLES, SIM_BUCKET, filters
from muster.bench.table import Column, render_table
from muster.bench.wire import WireCount, per_workload, wire_count
from muster.bus.kv import open_bucket
from muster.bus.service import run_loop
from muster.bus.setup import ensure_stream
from muster.bus.subjects import EVENTS_STREAM, stream_configs
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.launcher.nats_server import NatsServer

SECTION: Final = "floor"
READY_S: Final = 60.0  # a stand-in's start on a loaded machine: an interpreter and its imports
PROCESSES: Final = tuple(p for p in e2e.CPU_PROCESSES if p != "preemption")


class FloorRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    what: str  # "floor", or "e2e" (muster's own burst, `--with-e2e`)
    run: int  # the pair it belongs to, from 1
    workloads: int
    went_through: int  # workloads admitted and running
    throughput_per_s: float  # went through per second, first Submit to the last one through
    cpu_ms_per_workload: dict[str, float]  # process -> CPU ms per workload, "total" included
    stored_per_workload: float
    delivered_per_workload: float
    load_average: float  # the machine's, as the run began
    # Per process, its connections' messages in and out per workload (`bench.connz`).
    connz_per_workload: dict[str, dict[str, float]] = msgspec.field(default_factory=dict)
    layout: str = ""  # what a floor run plays (`floor_wire.LAYOUT`); "" for muster's own


async def prepare(js: JetStreamContext) -> None:
    """muster's streams, the bucket the floor writes, and the two durable consumers."""
    for config in stream_configs():
        await ensure_stream(js, config)
    await open_bucket(js, SIM_BUCKET)
    await js.add_consumer(
        EVENTS_STREAM,
        config=api.ConsumerConfig(
            durable_name=ADMISSION_DURABLE,
            ack_policy=api.AckPolicy.ALL,
            filter_subjects=filters("submitted"),
            max_ack_pending=1024,
            ack_wait=30.0,
        ),
    )
    await js.add_consumer(
        EVENTS_STREAM,
        config=api.ConsumerConfig(
            durable_name=BINDER_DURABLE,
            ack_policy=api.AckPolicy.EXPLICIT,
            filter_subjects=filters("admitted", "gang_permitted"),
            max_ack_pending=256,
            ack_wait=30.0,
        ),
    )


@contextlib.asynccontextmanager
async def stand_ins(url: str) -> AsyncIterator[dict[str, tuple[int, str]]]:
    """The six stand-ins running: role -> (pid, the gateway's address or "")."""
    started: dict[str, asyncio.subprocess.Process] = {}
    try:
        for role in ROLES:
            started[role] = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "muster.bench.floor_roles",
                role,
                url,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,  # as the launcher starts services (autogroup)
            )
        ready = {}
        for role, process in started.items():
            assert process.stdout is not None
            line = (await asyncio.wait_for(process.stdout.readline(), READY_S)).decode()
            if not line.startswith("ready"):
                code = process.returncode
                raise RuntimeError(f"floor stand-in {role} did not start (exit status {code})")
            ready[role] = (process.pid, line.removeprefix("ready").strip())
        yield ready
    finally:
        for process in started.values():
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in started.values():
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


async def run_floor(workloads: int, run: int) -> FloorRow:
    load = os.getloadavg()[0]
    log_dir = Path(tempfile.mkdtemp(prefix="muster-bench-floor-"))
    nats = NatsServer(log_dir / "jetstream", monitor=True)
    url = await nats.start(log_path=log_dir / "nats-server.log")
    nc = NatsClient()
    try:
        await nc.connect(url, name="muster-bench")
        js = nc.jetstream()
        await prepare(js)
        async with stand_ins(url) as ready:
            pids = {role: pid for role, (pid, _) in ready.items()}
            if nats.process is not None:
                pids["nats-server"] = nats.process.pid
            meter = e2e.cpu_meter(pids)
            traffic = functools.partial(connz.read_traffic, nats.monitor_url or "", pids)
            row = await _burst(ready["gateway"][1], js, workloads, meter, traffic)
    finally:
        await nc.close()
        await nats.stop()
    shutil.rmtree(log_dir, ignore_errors=True)
    return msgspec.structs.replace(row, run=run, load_average=round(load, 1))


async def _burst(
    gateway: str,
    js: JetStreamContext,
    workloads: int,
    meter: Callable[[], dict[str, float]],
    traffic: connz.TrafficReader,
) -> FloorRow:
    async with grpc.aio.insecure_channel(gateway) as channel:
        gw = services_pb2_grpc.GatewayStub(channel)
        warm_up = e2e.manifest_of(range(1), "json", prefix="warm-up")
        await gw.Submit(services_pb2.SubmitRequest(manifest=warm_up))
        if not await e2e.wait_stored(js, 1, timeout_s=e2e.WARM_UP_S):
            raise RuntimeError(f"the warm-up workload did not go through in {e2e.WARM_UP_S:g}s")
        wire_before = await wire_count(js)
        traffic_before = await traffic()
        cpu_before = meter()
        calls = iter(range(workloads))
        start = time.monotonic()

        async def caller() -> None:
            for i in calls:
                manifest = e2e.manifest_of(range(i, i + 1), "json")
                await gw.Submit(services_pb2.SubmitRequest(manifest=manifest))

        await asyncio.gather(*(caller() for _ in range(e2e.IN_FLIGHT)))
        await e2e.wait_stored(js, workloads + 1, timeout_s=60 + workloads / 20)
        elapsed = time.monotonic() - start
        cpu_after = meter()
        wire_after = await settled(js)
        traffic_after = await traffic()
        through = e2e.went_through(await e2e.stored_counts(js, named=False)) - 1
    stored, delivered = per_workload(wire_before, wire_after, workloads)
    return FloorRow(
        what="floor",
        run=0,
        workloads=workloads,
        went_through=through,
        throughput_per_s=round(through / max(elapsed, 1e-9), 1),
        cpu_ms_per_workload=e2e.cpu_per_workload(cpu_before, cpu_after, workloads),
        stored_per_workload=stored["total"],
        delivered_per_workload=delivered["total"],
        load_average=0.0,
        connz_per_workload=connz.per_workload(traffic_before, traffic_after, workloads),
        layout=wire.LAYOUT,
    )


async def settled(js: JetStreamContext, *, tries: int = 100) -> WireCount:
    """The wire's count once it stops moving: the last pod write's deliveries to the readers
    that do not answer it may still be on their way when the last `running` is stored."""
    last = await wire_count(js)
    for _ in range(tries):
        await asyncio.sleep(e2e.POLL_S)
        now = await wire_count(js)
        if now == last:
            break
        last = now
    return last


def muster_row(workloads: int, run: int, manifest: str = "yaml") -> FloorRow:
    """`bench e2e`'s burst case, 1 shard, one workload per Submit, as a row of this table."""
    load = os.getloadavg()[0]
    case = e2e.run_case(shards=1, workloads=workloads, rate_per_s=None, manifest=manifest)
    row = run_loop(case)
    what = "e2e" if manifest == "yaml" else f"e2e {manifest}"
    return FloorRow(
        what=what if row.valid else f"{what} (not valid: {', '.join(row.ended)} ended)",
        run=run,
        workloads=workloads,
        # Admitted: the case waited for each to run too (`row.bound` counts those `running`).
        went_through=row.admitted,
        throughput_per_s=row.throughput_per_s,
        cpu_ms_per_workload=row.cpu_ms_per_workload,
        stored_per_workload=row.stored_per_workload.get("total", 0.0),
        delivered_per_workload=row.delivered_per_workload.get("total", 0.0),
        load_average=round(load, 1),
        connz_per_workload=row.connz_per_workload,
    )


def run(
    *, scale: float, runs: int = 1, with_e2e: bool = False, manifest: str = "yaml"
) -> Iterator[FloorRow]:
    """The floor's burst `runs` times, each followed by muster's own when `with_e2e`, its
    client writing `manifest` (the floor's always sends JSON)."""
    workloads = max(10, round(3000 * scale))  # the e2e burst's count at the same scale
    for i in range(1, runs + 1):
        yield run_loop(run_floor(workloads, i))
        if with_e2e:
            yield muster_row(workloads, i, manifest)


def not_valid(row: FloorRow) -> str | None:
    if row.went_through < row.workloads or "(not valid" in row.what:
        return (
            f"{row.what} run {row.run}: {row.went_through} of {row.workloads} workloads went "
            "through"
        )
    return None


def render(rows: list[FloorRow]) -> str:
    columns: list[Column[FloorRow]] = [
        Column("CPU ms/workload", lambda r: r.what, numeric=False),
        Column("RUN", lambda r: str(r.run)),
        Column("LOAD", lambda r: f"{r.load_average:g}"),
        Column("WORKLOADS", lambda r: str(r.workloads)),
        Column("WL/s", lambda r: f"{r.throughput_per_s:g}"),
        *(_cpu(p) for p in PROCESSES),
        Column("STORED/wl", lambda r: f"{r.stored_per_workload:g}"),
        Column("DELIVERED/wl", lambda r: f"{r.delivered_per_workload:g}"),
    ]
    text = render_table(columns, rows)
    text += "".join(f"floor layout: {x}\n" for x in sorted({r.layout for r in rows if r.layout}))
    text += "\n" + connz.render([(f"{r.what} run {r.run}", r.connz_per_workload) for r in rows])
    pairs = shares(rows)
    if pairs:
        text += "\n" + render_table(_share_columns(), pairs)
    return text


def _cpu(process: str) -> Column[FloorRow]:
    return Column(process.upper(), lambda r: f"{r.cpu_ms_per_workload.get(process, 0.0):.2f}")


class Share(msgspec.Struct, frozen=True):
    run: int
    floor: Mapping[str, float]
    muster: Mapping[str, float]


def shares(rows: list[FloorRow]) -> list[Share]:
    """Per run with both, the floor's and muster's CPU per workload side by side."""
    floors = {r.run: r for r in rows if r.what == "floor"}
    return [
        Share(r.run, floors[r.run].cpu_ms_per_workload, r.cpu_ms_per_workload)
        for r in rows
        if r.what.startswith("e2e") and r.run in floors
    ]


def _share_columns() -> list[Column[Share]]:
    def cell(process: str) -> Column[Share]:
        def text(s: Share) -> str:
            muster = s.muster.get(process, 0.0)
            return f"{100 * s.floor.get(process, 0.0) / muster:.0f} %" if muster else "-"

        return Column(process.upper(), text)

    return [
        Column("FLOOR / e2e CPU", lambda s: f"run {s.run}", numeric=False),
        *(cell(p) for p in PROCESSES),
    ]
