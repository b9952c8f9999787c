"""`muster bench gateway`: what callers without valid credentials cost the gateway.

The gateway runs as its own process (with a tokens file, over a loopback nats-server); a client
sends bursts of large Submits that it must refuse, all in flight at once, and the gateway's
resident memory (VmRSS, /proc) is sampled before, during (the peak) and after each burst. A
refused call's body must be neither decoded nor buffered beyond a flow-control window, so the
peak stays small and the memory goes back to where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Final

import grpc
import grpc.aio
import msgspec

from muster.bench.memory import rss_mib
from muster.bench.table import Column, number, render_table
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.gateway.auth_tokens import token_hash
from muster.launcher.lifeline import tied_to_launcher
from muster.launcher.nats_server import NatsServer

SECTION: Final = "gateway"
CALLS: Final = 128
REQUEST_BYTES: Final = 4 * 1024 * 1024
_SAMPLE_S: Final = 0.005
_SETTLE_S: Final = 1.0
_MIB: Final = 1024 * 1024


class GatewayRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    case: str
    calls: int  # in flight at once
    request_mib: float  # each call's body
    answered: str  # the status code every call got
    baseline_mib: float  # gateway RSS before the burst
    peak_growth_mib: float  # highest RSS during the burst, minus the baseline
    after_growth_mib: float  # RSS a second after the burst, minus the baseline
    wall_s: float


@contextlib.asynccontextmanager
async def gateway_process(
    directory: Path, *, tokens: bool = True
) -> AsyncIterator[tuple[int, str, NatsServer]]:
    """A nats-server and a gateway process, with a tokens file unless `tokens` is False
    (then everyone is an admin, as under `muster run`); (gateway pid, address, nats-server)."""
    nats = NatsServer(directory / "nats")
    url = await nats.start(log_path=directory / "nats.log")
    security: tuple[str, ...] = ()
    if tokens:
        path = directory / "tokens.yaml"
        path.write_text(f"tokens: [{{sha256: {token_hash(secrets.token_hex())}, user: someone}}]\n")
        security = ("--tokens-file", str(path))
    with (directory / "gateway.log").open("ab") as log:
        argv = [
            sys.executable, "-m", "muster.gateway", "--nats", url, "--listen", "127.0.0.1:0",
            *security, "--log-level", "WARNING",
        ]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            *tied_to_launcher(argv), stdout=asyncio.subprocess.PIPE, stderr=log
        )
    try:
        assert proc.stdout is not None
        address = ""
        async with asyncio.timeout(60):
            while not address:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise RuntimeError("the gateway exited before listening")
                found = re.match(r"gateway: (\S+)", line)
                address = found.group(1) if found else ""
        yield proc.pid, address, nats
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        await nats.stop()


async def burst(
    address: str, *, calls: int, request_bytes: int, metadata: Sequence[tuple[str, str]]
) -> list[str]:
    """`calls` Submits of `request_bytes` each, all in flight at once; each one's status."""
    request = services_pb2.SubmitRequest(manifest="#" * request_bytes)
    options = [("grpc.max_send_message_length", request_bytes + _MIB)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub = services_pb2_grpc.GatewayStub(channel)

        async def one() -> str:
            try:
                await stub.Submit(request, metadata=tuple(metadata) or None, timeout=60)
            except grpc.aio.AioRpcError as exc:
                return str(exc.code().name)
            return "OK"

        return await asyncio.gather(*(one() for _ in range(calls)))


async def measure(
    case: str, pid: int, address: str, *, calls: int, metadata: Sequence[tuple[str, str]]
) -> GatewayRow:
    baseline = rss_mib(pid)
    peak = baseline
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mib(pid))
            await asyncio.sleep(_SAMPLE_S)  # sampling another process: no event to wait on

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    codes = await burst(address, calls=calls, request_bytes=REQUEST_BYTES, metadata=metadata)
    wall_s = time.perf_counter() - started
    done.set()
    await sampler
    await asyncio.sleep(_SETTLE_S)  # let the gateway finish closing the refused streams
    return GatewayRow(
        case=case,
        calls=calls,
        request_mib=REQUEST_BYTES / _MIB,
        answered="/".join(sorted(set(codes))),
        baseline_mib=round(baseline, 1),
        peak_growth_mib=round(peak - baseline, 1),
        after_growth_mib=round(rss_mib(pid) - baseline, 1),
        wall_s=round(wall_s, 2),
    )


async def _run(scale: float) -> list[GatewayRow]:
    calls = max(1, round(CALLS * scale))
    cases = (
        ("no credentials", ()),
        ("unknown bearer token", (("authorization", f"Bearer {secrets.token_hex()}"),)),
        ("no credentials, again", ()),
    )
    with tempfile.TemporaryDirectory(prefix="muster-bench-gateway-") as tmp:
        async with gateway_process(Path(tmp)) as (pid, address, _):
            await burst(address, calls=1, request_bytes=1024, metadata=())  # warm up
            await asyncio.sleep(_SETTLE_S)
            return [
                await measure(case, pid, address, calls=calls, metadata=metadata)
                for case, metadata in cases
            ]


def run(*, scale: float = 1.0) -> Iterator[GatewayRow]:
    if not os.path.exists("/proc/self/status"):
        raise RuntimeError("muster bench gateway reads memory from /proc: Linux only")
    yield from asyncio.run(_run(scale))


def render(rows: list[GatewayRow]) -> str:
    columns: list[Column[GatewayRow]] = [
        Column("case", lambda r: r.case, numeric=False),
        Column("calls in flight", lambda r: str(r.calls)),
        Column("MiB each", lambda r: number(r.request_mib)),
        Column("answered", lambda r: r.answered, numeric=False),
        Column("RSS before MiB", lambda r: number(r.baseline_mib, digits=1)),
        Column("peak growth MiB", lambda r: number(r.peak_growth_mib, digits=1)),
        Column("growth after MiB", lambda r: number(r.after_growth_mib, digits=1)),
        Column("wall s", lambda r: number(r.wall_s, digits=2)),
    ]
    return render_table(columns, rows)
