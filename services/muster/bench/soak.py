"""`muster bench soak`: what every process keeps after waves of workloads came and went.

One fresh loopback nats-server and the service processes `muster run` starts (one admission
shard, the simulated cluster, every service at its defaults). Each wave submits PER_WAVE
one-pod workloads (PER_CALL per Submit, CALLERS calls in flight, over 8 LocalQueues), lets each
run a second and finish, deletes each through `Gateway.Delete`, waits for the buckets to stop
changing, then asks every service process for its census (`census`: RSS and the length of
every large map it holds) and reads nats-server's RSS. One row per process per wave.

Everything a wave brought is gone at its end, so a map whose length grows with the waves keeps
something per workload for good: the last wave's rows name each one (`growing`) and the run
exits 1 (NOT VALID). A map that keeps the newest N by design (`BOUNDED_BY_COUNT`, each with
its cap) is named as `capped` instead: bounded, at that many entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import grpc
import msgspec
from nats.js import JetStreamContext

from muster.api.load import _PLAIN_MAX_ENTRIES
from muster.api.wellknown import RUN_SECONDS_ANNOTATION
from muster.bench import census
from muster.bench.buckets import until_quiet, until_stored
from muster.bench.e2e import config_yaml, nodes, workload_json
from muster.bench.live import Live, live_stack
from muster.bench.table import Column, number, render_table
from muster.bus.service import run_loop
from muster.cluster.sim.collection import DELETIONS_KEPT
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.core.placement.nodes import CHANGES_KEPT
from muster.core.submissions import ENDED_KEPT_S
from muster.gateway.known import DELETED_KEPT

SECTION: Final = "soak"
NAMESPACE: Final = "bench"
WAVES: Final = 8
PER_WAVE: Final = 2_500
PER_CALL: Final = 16
CALLERS: Final = 16
SHOWN: Final = 4  # largest maps shown per process and wave
# A map that grew by at least this share of a wave's workloads in every wave after the first
# keeps something for good: per workload, or per some of them (one pod each).
GROWTH: Final = 0.02
CENSUS_WAIT_S: Final = 120.0
POLL_S: Final = 0.2
NATS: Final = "nats-server"

# Maps that keep the newest N entries (or those of the last N seconds) by design: `census`
# key -> N, as its code says.
BOUNDED_BY_COUNT: Final[Mapping[str, str]] = {
    # By time: the ends of the last --ended-kept-seconds (MUSTER_ENDED_KEPT_SECONDS).
    "muster.core.submissions.EndedSubmissions._ended": f"{ENDED_KEPT_S:g} s of ends",
    "muster.binder.fences.Fences._ended": f"{ENDED_KEPT_S:g} s of ends",
    "muster.binder.fences.Fences._fence": f"{ENDED_KEPT_S:g} s of ends, with _ended",
    "muster.cluster.sim.collection.Deletions._at": f"{DELETIONS_KEPT}",
    "muster.gateway.known.KnownWorkloads.deleted": f"{DELETED_KEPT}",
    "muster.core.placement.nodes.NodeTable._changes": f"{CHANGES_KEPT}",
    "muster.api.load._PLAIN": f"{_PLAIN_MAX_ENTRIES}, then emptied",
    "muster.core.heartbeat.RowCache._nodes": "2 x nodes + 1024, then a new cache",
}


class Answer(msgspec.Struct, frozen=True):
    """What one process's census file holds (`census.write`)."""

    pid: int
    rss_kb: int
    maps: dict[str, int]


class SoakRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    wave: int
    workloads: int  # submitted, run and deleted so far
    per_wave: int
    process: str
    rss_mb: float
    maps: dict[str, int]  # census key -> entries, largest first (the table shows SHOWN)
    wave_s: float  # the wave's wall time, census included
    load: float  # the machine's 1-minute load average at its end
    answered: bool = True  # the process wrote its census
    growing: list[str] = []  # last wave only: "key first -> last", unbounded
    capped: list[str] = []  # last wave only: "key first -> last (cap N)", grew but bounded


def not_valid(row: SoakRow) -> str | None:
    """Why the run is not a soak that held: a process that never answered, or a map that grew
    with every wave."""
    if not row.answered:
        return f"wave {row.wave}: {row.process} wrote no census (ended?)"
    if row.growing:
        return f"{row.process}: grew with every wave: {'; '.join(row.growing)}"
    return None


def grew(sizes: list[int], *, per_wave: int) -> bool:
    """Whether a map's sizes after each wave grew by GROWTH of a wave's workloads (at least
    one entry) in every wave after the first (which fills caches); judged from 4 waves on."""
    step = max(1.0, GROWTH * per_wave)
    return len(sizes) >= 4 and all(b - a >= step for a, b in itertools.pairwise(sizes[1:]))


def judged(history: Mapping[str, list[int]], *, per_wave: int) -> tuple[list[str], list[str]]:
    """One process's maps over the waves (0 where below the census's floor): the growing ones
    without a cap, and those with one."""
    growing: list[str] = []
    capped: list[str] = []
    for key, sizes in sorted(history.items()):
        if not grew(sizes, per_wave=per_wave):
            continue
        if key in BOUNDED_BY_COUNT:
            capped.append(f"{key} {sizes[0]} -> {sizes[-1]} (cap {BOUNDED_BY_COUNT[key]})")
        else:
            growing.append(f"{key} {sizes[0]} -> {sizes[-1]}")
    return growing, capped


def manifest(wave: int, first: int, count: int) -> str:
    """One Submit: `bench e2e`'s workloads (one pod each, over its LocalQueues), named
    `w<wave>-<i>`, each running a second; one JSON List."""
    items = [workload_json(i, name=f"w{wave}-{i}") for i in range(first, first + count)]
    for item in items:
        metadata = item["metadata"]
        assert isinstance(metadata, dict)
        metadata["annotations"] = {RUN_SECONDS_ANNOTATION: "1"}
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


async def _wave(gateway: str, wave: int, per_wave: int, js: JetStreamContext) -> None:
    """Submit, run, finish and delete `per_wave` workloads; until the buckets are quiet."""
    async with grpc.aio.insecure_channel(gateway) as channel:
        gw = services_pb2_grpc.GatewayStub(channel)
        firsts = iter(range(0, per_wave, PER_CALL))

        async def submitter() -> None:
            for first in firsts:
                text = manifest(wave, first, min(PER_CALL, per_wave - first))
                await gw.Submit(services_pb2.SubmitRequest(manifest=text))

        await asyncio.gather(*(submitter() for _ in range(CALLERS)))
        done = wave * per_wave
        await until_stored(js, "finished", done, timeout_s=120 + per_wave / 5)
        names = iter(range(per_wave))

        async def deleter() -> None:
            for i in names:
                ref = services_pb2.ObjectRef(
                    kind="Workload", namespace=NAMESPACE, name=f"w{wave}-{i}"
                )
                await gw.Delete(services_pb2.DeleteRequest(object=ref))

        await asyncio.gather(*(deleter() for _ in range(2 * CALLERS)))
        await until_stored(js, "deleted", done, timeout_s=120 + per_wave / 20)
    await until_quiet(js)


async def _census(pids: Mapping[str, int], directory: Path, wave: int) -> dict[str, Answer]:
    """Each process's census of this wave (`<pid>-<wave>.json`); absent: it never answered."""
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):  # ended: it answers nothing
            os.kill(pid, census.SIGNAL)
    found: dict[str, Answer] = {}
    deadline = time.monotonic() + CENSUS_WAIT_S
    while len(found) < len(pids) and time.monotonic() < deadline:
        for name, pid in pids.items():
            path = directory / f"{pid}-{wave}.json"
            if name not in found and path.exists():
                found[name] = msgspec.json.decode(path.read_bytes(), type=Answer)
        await asyncio.sleep(POLL_S)  # files other processes write: nothing to await
    return found


def _rows(
    wave: int,
    per_wave: int,
    answers: Mapping[str, Answer],
    pids: Mapping[str, int],
    history: dict[str, dict[str, list[int]]],
    *,
    last: bool,
    wave_s: float,
) -> list[SoakRow]:
    rows: list[SoakRow] = []
    for name in pids:
        answer = answers.get(name)
        maps = answer.maps if answer else {}
        seen = history.setdefault(name, {})
        for key in seen.keys() | maps.keys():
            seen.setdefault(key, [0] * (wave - 1)).append(maps.get(key, 0))
        growing, capped = judged(seen, per_wave=per_wave) if last else ([], [])
        largest = sorted(maps.items(), key=lambda kv: (-kv[1], kv[0]))
        rss_kb = answer.rss_kb if answer else census.rss_kb(pids[name])
        rows.append(
            SoakRow(
                wave=wave,
                workloads=wave * per_wave,
                per_wave=per_wave,
                process=name,
                rss_mb=round(rss_kb / 1024, 1),
                maps=dict(largest),
                wave_s=round(wave_s, 1),
                load=round(os.getloadavg()[0], 1),
                answered=answer is not None,
                growing=growing,
                capped=capped,
            )
        )
    return rows


def _with_census(scratch: Path, counts: Path, *, min_size: int) -> dict[str, str]:
    """The services' environment that installs the census (`census` says how), writing to
    `counts`."""
    site = scratch / "site"
    site.mkdir()
    counts.mkdir()
    (site / "sitecustomize.py").write_text(census.SITECUSTOMIZE)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {
        census.CENSUS_DIR_ENV: str(counts),
        census.MIN_SIZE_ENV: str(min_size),
        "PYTHONPATH": path,
    }


async def run_case(*, waves: int, per_wave: int) -> list[SoakRow]:
    with tempfile.TemporaryDirectory(prefix="muster-bench-soak-") as scratch:
        counts = Path(scratch, "census")
        environment = _with_census(Path(scratch), counts, min_size=max(10, per_wave // 10))
        async with live_stack(
            prefix="muster-bench-soak-", nodes=nodes(2 * per_wave), environment=environment
        ) as live:
            return await _waves(live, counts, waves=waves, per_wave=per_wave)


async def _waves(live: Live, counts: Path, *, waves: int, per_wave: int) -> list[SoakRow]:
    pids = {s.name: s.process.pid for s in live.stack.services if s.process is not None}
    assert live.nats.process is not None
    pids_and_nats = {**pids, NATS: live.nats.process.pid}
    history: dict[str, dict[str, list[int]]] = {}
    rows: list[SoakRow] = []
    async with grpc.aio.insecure_channel(live.stack.gateway_address) as channel:
        gw = services_pb2_grpc.GatewayStub(channel)
        await gw.Submit(services_pb2.SubmitRequest(manifest=config_yaml()))
    for wave in range(1, waves + 1):
        started = time.monotonic()
        await _wave(live.stack.gateway_address, wave, per_wave, live.js)
        answers = await _census(pids, counts, wave)
        nats_pid = pids_and_nats[NATS]
        answers[NATS] = Answer(pid=nats_pid, rss_kb=census.rss_kb(nats_pid), maps={})
        wave_s = time.monotonic() - started
        rows += _rows(
            wave, per_wave, answers, pids_and_nats, history, last=wave == waves, wave_s=wave_s
        )
        print(
            f"muster bench soak: wave {wave} of {waves} ({wave * per_wave} workloads) "
            f"in {wave_s:.0f} s, load {os.getloadavg()[0]:.1f}",
            file=sys.stderr,
            flush=True,
        )
    return rows


def run(*, scale: float, waves: int = WAVES) -> Iterator[SoakRow]:
    """`waves` waves of PER_WAVE workloads times `scale` (at least 10)."""
    yield from run_loop(run_case(waves=waves, per_wave=max(10, round(PER_WAVE * scale))))


def _maps(row: SoakRow) -> str:
    shown = list(row.maps.items())[:SHOWN]
    return "  ".join(f"{k.removeprefix('muster.')} {v}" for k, v in shown) or "-"


def render(rows: list[SoakRow]) -> str:
    columns: list[Column[SoakRow]] = [
        Column("wave", lambda r: str(r.wave)),
        Column("workloads", lambda r: str(r.workloads)),
        Column("process", lambda r: r.process, numeric=False),
        Column("wave s", lambda r: number(r.wave_s, digits=0)),
        Column("load", lambda r: number(r.load, digits=1)),
        Column("RSS MB", lambda r: number(r.rss_mb, digits=1)),
        Column("largest maps (entries)", _maps, numeric=False),
    ]
    table = render_table(columns, [r for r in rows if isinstance(r, SoakRow)])
    last = [r for r in rows if isinstance(r, SoakRow) and (r.growing or r.capped)]
    notes = [f"{r.process}: bounded by count: {c}" for r in last for c in r.capped]
    notes += [f"{r.process}: GROWS with every wave: {g}" for r in last for g in r.growing]
    return table + "".join(f"{line}\n" for line in notes)
