"""`muster bench submit`: the gateway's and the client's CPU per one-workload Submit call.

A gateway process on a loopback nats-server, with no other service (nothing consumes what it
publishes), and this process as a `grpc.aio` client making one `Gateway.Submit` per workload,
the manifest `muster bench e2e` submits (YAML; with `--manifest json`, one JSON object). CPU =
user + system time of the gateway, the client and the nats-server over the calls, per call; the
gateway's voluntary context switches per call (its threads handing the GIL and the calls to
each other: what its CPU follows) and its read and write system calls per call (calls that
share a socket write or read count less than one each). The e2e burst has the same calls among
every service's work, where a change of a few hundredths of a millisecond per call is lost in
the noise of a loaded machine; here it is not. Cases: 64 calls in flight (the e2e burst's
concurrency) and one (a lone caller: no call shares a wake-up with another).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import grpc
import msgspec
from nats.aio.client import Client as NatsClient

from muster.bench.connz import syscalls
from muster.bench.e2e import MANIFESTS, config_yaml, manifest_of
from muster.bench.gateway import gateway_process
from muster.bench.table import Column, number, render_table
from muster.bus.service import run_loop
from muster.bus.subjects import EVENTS_STREAM
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.launcher.cpu_time import cpu_s

SECTION: Final = "submit"
CALLS: Final = 6000
IN_FLIGHT: Final = (64, 1)
WARM_UP: Final = 200  # calls before measuring: connections, caches, the interpreter specialising


class SubmitRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    calls: int
    in_flight: int
    calls_per_s: float
    gateway_ms: float  # CPU per call
    client_ms: float
    nats_ms: float
    stored: int  # events the calls stored (one per workload)
    # The gateway's threads' voluntary context switches per call: the GIL and the calls handed
    # between gRPC's threads and the loop. Its CPU per call follows this count (about 7 per
    # call at 0.55 ms, 19 at 1.0 ms in one session), which a loaded machine's timing does not.
    gateway_switches: float = 0.0
    # The gateway's read and write system calls per call (/proc/PID/io): gRPC's and NATS's.
    gateway_reads: float = 0.0
    gateway_writes: float = 0.0
    manifest: str = "yaml"  # how the client wrote each call's workload: yaml or json

    @property
    def total_ms(self) -> float:
        return self.gateway_ms + self.client_ms + self.nats_ms


async def _measure(
    address: str,
    url: str,
    pids: tuple[int, int],
    *,
    calls: int,
    in_flight: int,
    manifest: str = "yaml",
) -> SubmitRow:
    gateway_pid, nats_pid = pids
    first = time.monotonic_ns()  # names unique to this case: every case submits new workloads
    async with grpc.aio.insecure_channel(address) as channel:
        stub = services_pb2_grpc.GatewayStub(channel)
        await stub.Submit(services_pb2.SubmitRequest(manifest=config_yaml()))
        for i in range(WARM_UP):
            text = manifest_of(range(i, i + 1), manifest, prefix=f"warm-{first}")
            await stub.Submit(services_pb2.SubmitRequest(manifest=text))
        names = iter(range(calls))

        async def caller() -> None:
            for i in names:
                text = manifest_of(range(i, i + 1), manifest, prefix=f"w-{first}")
                await stub.Submit(services_pb2.SubmitRequest(manifest=text))

        stored = await _stored(url)
        switches = voluntary_switches(gateway_pid)
        io = syscalls({"gateway": gateway_pid}).get("gateway", {})
        before = cpu_s(gateway_pid), time.process_time(), cpu_s(nats_pid)
        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(in_flight)))
        wall_s = time.perf_counter() - started
        after = cpu_s(gateway_pid), time.process_time(), cpu_s(nats_pid)
        switches = voluntary_switches(gateway_pid) - switches
        io_after = syscalls({"gateway": gateway_pid}).get("gateway", {})
    gateway, client, nats = ((a - b) * 1000 / calls for a, b in zip(after, before, strict=True))
    return SubmitRow(
        calls=calls,
        in_flight=in_flight,
        calls_per_s=round(calls / wall_s, 1),
        gateway_ms=round(gateway, 3),
        client_ms=round(client, 3),
        nats_ms=round(nats, 3),
        stored=await _stored(url) - stored,
        gateway_switches=round(switches / calls, 2),
        gateway_reads=round((io_after.get("read_calls", 0) - io.get("read_calls", 0)) / calls, 2),
        gateway_writes=round(
            (io_after.get("write_calls", 0) - io.get("write_calls", 0)) / calls, 2
        ),
        manifest=manifest,
    )


def voluntary_switches(pid: int) -> int:
    """How often process `pid`'s threads living now gave up the CPU to wait (Linux: /proc;
    0 elsewhere)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


async def _stored(url: str) -> int:
    nc = NatsClient()
    await nc.connect(url, name="muster-bench")
    try:
        info = await nc.jetstream().stream_info(EVENTS_STREAM)
        return int(info.state.messages)
    finally:
        await nc.close()


async def _run(scale: float, manifest: str) -> list[SubmitRow]:
    if manifest not in MANIFESTS:
        raise ValueError(f"manifest must be one of {', '.join(MANIFESTS)}, got {manifest!r}")
    calls = max(10, round(CALLS * scale))
    with tempfile.TemporaryDirectory(prefix="muster-bench-submit-") as tmp:
        async with gateway_process(Path(tmp), tokens=False) as (pid, address, nats):
            assert nats.process is not None
            url, pids = nats.url, (pid, nats.process.pid)
            return [
                await _measure(
                    address, url, pids, calls=calls, in_flight=in_flight, manifest=manifest
                )
                for in_flight in IN_FLIGHT
            ]


def run(*, scale: float = 1.0, manifest: str = "yaml") -> Iterator[SubmitRow]:
    # The client on the loop the services use (uvloop when installed), as in `bench e2e`.
    yield from run_loop(_run(scale, manifest))


def render(rows: list[SubmitRow]) -> str:
    columns: list[Column[SubmitRow]] = [
        Column("calls", lambda r: str(r.calls)),
        Column("in flight", lambda r: str(r.in_flight)),
        Column("manifest", lambda r: r.manifest, numeric=False),
        Column("calls/s", lambda r: number(r.calls_per_s, digits=0)),
        Column("GATEWAY ms/call", lambda r: f"{r.gateway_ms:.3f}"),
        Column("CLIENT ms/call", lambda r: f"{r.client_ms:.3f}"),
        Column("NATS-SERVER ms/call", lambda r: f"{r.nats_ms:.3f}"),
        Column("TOTAL ms/call", lambda r: f"{r.total_ms:.3f}"),
        Column("GATEWAY switches/call", lambda r: f"{r.gateway_switches:.1f}"),
        Column("GATEWAY reads/call", lambda r: f"{r.gateway_reads:.2f}"),
        Column("GATEWAY writes/call", lambda r: f"{r.gateway_writes:.2f}"),
        Column("events stored", lambda r: str(r.stored)),
    ]
    return render_table(columns, rows)
