"""`muster bench kueue-live`: Kueue's baseline through the live services, in real time.

The plan of `bench admission` (5 cohorts x 6 ClusterQueues, 15 000 one-pod workloads in three
classes, run times 200 / 500 / 1 000 ms) is first simulated on the virtual clock (the engine of
`muster simulate`): its makespan is what the quota itself allows. Then a fresh nats-server and
every service process (`muster run`'s stack, sim cluster at speed 1) get the same objects
through `Gateway.Submit`, one workload per call, each at its arrival (Kueue's generator creates
them one by one, every `creationIntervalMs` per ClusterQueue). Pods run on the sim kubelet for
their run time from the moment they start, so each workload also holds its quota while it is
bound and started; Kueue's perf runner finishes a Workload its run time after admission, with
no pods at all.

Wall time is from the schedule's start to the last `finished` event. Submit->admitted runs from
the workload's planned arrival (so a client falling behind counts against the row) to its first
`admitted` event. Mean usage while work waits is `bench admission`'s (`muster.bench.metrics`),
read from the stored events: quota held from its reservation (`quota_reserved`, or an `admitted`
with it) until `eviction_completed` or `finished`, waiting from the Submit until then. Lost:
planned workloads that never finished (the run waits for every one, up to a timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import grpc
import msgspec
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from muster.bench.e2e import cpu_meter, stored_counts
from muster.bench.kueue_live_plan import (
    LiveEvent,
    arrived,
    as_sim_events,
    config_manifest,
    warm_up_manifest,
    workload_manifests,
)
from muster.bench.kueue_perf import PerfConfig, Plan, PlannedWorkload, generate
from muster.bench.metrics import measure, percentile
from muster.bench.sim_nodes import node_manifests
from muster.bench.table import Column, number, render_table
from muster.bus.service import run_loop
from muster.cluster.sim.backend import SimBackend
from muster.cluster.sim.kubelet import CREATED
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.launcher.nats_server import NatsServer
from muster.launcher.stack import SOLE_BINDERS_BOUND_EVENTS, SOLE_GATEWAYS_CLAIMS, Stack
from muster.sim import run_scenario

SECTION = "kueue-live"
CLUSTER = "local"
IN_FLIGHT = 64  # Submit calls at once, when arrivals come faster than the gateway answers
POLL_S = 0.2
NODES = 10  # of 128 cpu: twice the 600 cpu of the baseline's quota, so pods never wait for room
NODE_CPU = 128
READ_TYPES = ("quota_reserved", "admitted", "gang_permitted", "running", "evicted",
              "eviction_completed", "requeued", "finished")  # fmt: skip
# The path of a workload that ran once, stage by stage: where a live run loses time against
# the virtual clock, on which a workload holds its quota for exactly its run time. Placed is
# gang-permit's `gang_permitted`; placed->running is the binder making its pod on its node,
# the kubelet starting it and the watcher telling it (the binder the launcher starts tells no
# `bound` for it: docs/events.md, "`bound` only for binds"). The last, admitted->finished less
# the run time, is what the live run adds to that hold.
STAGES = (("admitted", "gang_permitted"), ("gang_permitted", "running"), ("admitted", "finished"))
KUEUE_WALL_S = 351.0  # Kueue's published baseline (test/performance/scheduler, rangespec)
TARGET_RATIO = 1.2
TARGET_WALL_S = 90.0
TARGET_USAGE_PCT = 90.0


class ClassLatency(msgspec.Struct, frozen=True, kw_only=True):
    """Submit->admitted of one class, ms: from the planned arrival to the first admission."""

    workloads: int
    admitted: int
    p50_ms: float | None
    p99_ms: float | None


class KueueLiveRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    config: str
    scale: float
    shards: int
    run_from: str  # what the sim kubelet counts a pod's run time from: created or started
    workloads: int
    cluster_queues: int
    cohorts: int
    finished: int
    lost: int  # planned workloads that never finished
    preemptions: int  # `evicted` events
    wall_s: float  # schedule start -> last finished
    virtual_makespan_s: float  # the same plan on the virtual clock
    mean_usage_pct: float | None  # while work waits (muster.bench.metrics)
    virtual_mean_usage_pct: float | None
    admit: dict[str, ClassLatency]  # class -> submit->admitted
    # "admitted->gang_permitted", ...: p50 / p99 ms over the workloads never evicted;
    # admitted->finished less the run time
    stages_ms: dict[str, tuple[float, float]]
    max_submit_lag_ms: float  # how late the client started a Submit against its arrival
    cpu_s: dict[str, float]  # process -> CPU seconds used during the run, "total" included

    @property
    def ratio(self) -> float:
        return self.wall_s / self.virtual_makespan_s if self.virtual_makespan_s else 0.0


def run(
    *, config: PerfConfig, scale: float, shards: int = 1, run_from: Sequence[str] = (CREATED,)
) -> Iterator[KueueLiveRow]:
    """One row per `run_from` (see `Kubelet`): `created` finishes each workload its run time
    after admission, as Kueue's perf runner does; `started`, after its pod started."""
    plan = generate(config, scale=scale)
    virtual = measure(
        run_scenario(plan.objects, config=None, until_s=None).events,
        plan.workloads,
        cohort_nominal_milli=plan.cohort_nominal_milli,
    )
    for clock in run_from:
        live = run_loop(run_live(plan, shards=shards, run_from=clock,
                                 timeout_s=60 + 3 * virtual.makespan_s))  # fmt: skip
        yield row_of(plan, live, shards=shards, run_from=clock,
                     virtual_makespan_s=virtual.makespan_s,
                     virtual_usage=virtual.mean_usage_while_waiting)  # fmt: skip


class LiveRun(msgspec.Struct, frozen=True, kw_only=True):
    """What the live run recorded; times are host nanoseconds (`time.time_ns`)."""

    start_ns: int
    submitted_ns: dict[str, int]  # workload -> start of its Submit call
    events: list[LiveEvent]  # of READ_TYPES, in stream order
    cpu_s: dict[str, float]


async def run_live(plan: Plan, *, shards: int, run_from: str, timeout_s: float) -> LiveRun:
    """Start nats-server and the services, run `plan` through them, stop everything."""
    log_dir = Path(tempfile.mkdtemp(prefix="muster-bench-kueue-live-"))
    nats = NatsServer(log_dir / "jetstream")
    url = await nats.start(log_path=log_dir / "nats-server.log")
    stack = Stack(nats_url=url, cluster=CLUSTER, shards=shards, speed=1.0, log_dir=log_dir,
                  service_args={"sim-cluster": ["--run-from", run_from]},
                  name_claims=SOLE_GATEWAYS_CLAIMS,
                  bound_events=SOLE_BINDERS_BOUND_EVENTS)  # fmt: skip
    try:
        await stack.start()
        backend = await SimBackend.connect(url, cluster=CLUSTER)
        for node in nodes():
            await backend.apply(node)
        await backend.close()
        pids = {s.name: s.process.pid for s in stack.services if s.process is not None}
        if nats.process is not None:
            pids["nats-server"] = nats.process.pid
        nc = NatsClient()
        await nc.connect(url, name="muster-bench-kueue-live")
        try:
            live = await _drive(stack.gateway_address, nc.jetstream(), plan, cpu_meter(pids),
                                timeout_s=timeout_s)  # fmt: skip
        finally:
            await nc.close()
    finally:
        await stack.stop()
        await nats.stop()
    shutil.rmtree(log_dir, ignore_errors=True)  # kept when the run failed: the error names it
    return live


def nodes() -> list[dict[str, object]]:
    return node_manifests(NODES, cpu=NODE_CPU, memory="1Ti", pods=1000)


async def _drive(
    gateway: str,
    js: JetStreamContext,
    plan: Plan,
    meter: Callable[[], dict[str, float]],
    *,
    timeout_s: float,
) -> LiveRun:
    manifests = workload_manifests(plan)
    async with grpc.aio.insecure_channel(gateway) as channel:
        gw = services_pb2_grpc.GatewayStub(channel)
        await gw.Submit(services_pb2.SubmitRequest(manifest=config_manifest(plan)))
        await gw.Submit(services_pb2.SubmitRequest(manifest=warm_up_manifest()))
        await wait_finished(js, 1, timeout_s=30)
        cpu_before = meter()
        start_ns = time.time_ns()
        submitted = await submit_on_schedule(gw, plan.workloads, manifests, start_ns=start_ns)
        await wait_finished(js, len(manifests) + 1, timeout_s=timeout_s)  # with the warm-up
        cpu_after = meter()
        # Read once everything finished: a live watch would compete with the services.
        events = await read_events(services_pb2_grpc.EventsStub(channel))
    spent = {k: round(cpu_after[k] - cpu_before.get(k, 0.0), 2) for k in cpu_after}
    spent["total"] = round(sum(spent.values()), 2)
    return LiveRun(start_ns=start_ns, submitted_ns=submitted, events=events, cpu_s=spent)


async def submit_on_schedule(
    gw: services_pb2_grpc.GatewayStub,
    planned: Sequence[PlannedWorkload],
    manifests: Mapping[str, str],
    *,
    start_ns: int,
) -> dict[str, int]:
    """Submit each workload at `start_ns` + its arrival, one per call; workload -> the time
    its call started."""
    limit = asyncio.Semaphore(IN_FLIGHT)
    submitted: dict[str, int] = {}

    async def submit(key: str) -> None:
        async with limit:
            submitted[key] = time.time_ns()
            await gw.Submit(services_pb2.SubmitRequest(manifest=manifests[key]))

    async with asyncio.TaskGroup() as tasks:
        for wl in sorted(planned, key=lambda wl: wl.arrival_s):  # stable: plan order on ties
            delay_s = (start_ns + wl.arrival_s * 1e9 - time.time_ns()) / 1e9
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            tasks.create_task(submit(wl.key))
    return submitted


async def wait_finished(js: JetStreamContext, count: int, *, timeout_s: float) -> None:
    """Return once `count` workloads finished, or after `timeout_s` (the row says how many)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            # Polled: the counts live in the server, which notifies no one of them.
            while (await stored_counts(js, named=False)).get("finished", 0) < count:  # noqa: ASYNC110
                await asyncio.sleep(POLL_S)


async def read_events(events: services_pb2_grpc.EventsStub) -> list[LiveEvent]:
    request = services_pb2.WatchRequest(
        from_sequence=1, types=[f"workload.{t}" for t in READ_TYPES], history_only=True
    )
    return [
        LiveEvent(env.type.removeprefix("workload."), env.workload, env.time_unix_nano)
        async for env in events.Watch(request)
    ]


def row_of(
    plan: Plan,
    live: LiveRun,
    *,
    shards: int,
    run_from: str,
    virtual_makespan_s: float,
    virtual_usage: float | None,
) -> KueueLiveRow:
    planned = {wl.key for wl in plan.workloads}
    mine = [e for e in live.events if e.workload in planned]
    finished = {e.workload: e.time_ns for e in mine if e.type == "finished"}
    usage = measure(
        as_sim_events(mine, start_ns=live.start_ns),
        arrived(plan.workloads, live.submitted_ns, start_ns=live.start_ns),
        cohort_nominal_milli=plan.cohort_nominal_milli,
    ).mean_usage_while_waiting
    lag_ms = [
        (live.submitted_ns[wl.key] - live.start_ns) / 1e6 - wl.arrival_s * 1e3
        for wl in plan.workloads
        if wl.key in live.submitted_ns
    ]
    return KueueLiveRow(
        config=plan.config,
        scale=plan.scale,
        shards=shards,
        run_from=run_from,
        workloads=len(plan.workloads),
        cluster_queues=plan.cluster_queues,
        cohorts=len(plan.cohort_nominal_milli),
        finished=len(finished),
        lost=len(planned - finished.keys()),
        preemptions=sum(1 for e in mine if e.type == "evicted"),
        wall_s=round((max(finished.values(), default=live.start_ns) - live.start_ns) / 1e9, 3),
        virtual_makespan_s=round(virtual_makespan_s, 3),
        mean_usage_pct=_pct(usage),
        virtual_mean_usage_pct=_pct(virtual_usage),
        admit=admit_latency(plan, mine, start_ns=live.start_ns),
        stages_ms=stage_latency(plan, mine),
        max_submit_lag_ms=round(max(lag_ms, default=0.0), 1),
        cpu_s=live.cpu_s,
    )


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else round(100 * fraction, 2)


def admit_latency(
    plan: Plan, events: Sequence[LiveEvent], *, start_ns: int
) -> dict[str, ClassLatency]:
    """Per class, planned arrival -> first `admitted`, in ms."""
    admitted: dict[str, int] = {}
    for e in events:
        if e.type == "admitted":
            admitted.setdefault(e.workload, e.time_ns)
    samples: dict[str, list[float]] = {name: [] for name in plan.classes}
    counts = dict.fromkeys(plan.classes, 0)
    for wl in plan.workloads:
        counts[wl.workload_class] += 1
        if wl.key in admitted:
            since_start_ms = (admitted[wl.key] - start_ns) / 1e6
            samples[wl.workload_class].append(since_start_ms - wl.arrival_s * 1e3)
    return {name: _latency(counts[name], sorted(samples[name])) for name in plan.classes}


def stage_latency(plan: Plan, events: Sequence[LiveEvent]) -> dict[str, tuple[float, float]]:
    """p50 and p99 ms of each of `STAGES`, over the workloads admitted once and never evicted."""
    run_s: dict[str, float] = {wl.key: wl.run_s for wl in plan.workloads}
    seen: dict[str, dict[str, int]] = {}
    for e in events:
        seen.setdefault(e.workload, {}).setdefault(e.type, e.time_ns)
    out: dict[str, tuple[float, float]] = {}
    for first, then in STAGES:
        samples = sorted(
            (times[then] - times[first]) / 1e6 - (run_s[key] * 1e3 if then == "finished" else 0)
            for key, times in seen.items()
            if first in times and then in times and "evicted" not in times
        )
        if samples:
            out[f"{first}->{then}"] = (round(percentile(samples, 50), 1),
                                       round(percentile(samples, 99), 1))  # fmt: skip
    return out


def _latency(workloads: int, ordered: list[float]) -> ClassLatency:
    if not ordered:
        return ClassLatency(workloads=workloads, admitted=0, p50_ms=None, p99_ms=None)
    return ClassLatency(
        workloads=workloads,
        admitted=len(ordered),
        p50_ms=round(percentile(ordered, 50), 1),
        p99_ms=round(percentile(ordered, 99), 1),
    )


# --- the table -------------------------------------------------------------------------------


def render(rows: list[KueueLiveRow]) -> str:
    classes = list(dict.fromkeys(name for row in rows for name in row.admit))
    columns: list[Column[KueueLiveRow]] = [
        Column("CONFIG", lambda r: r.config, numeric=False),
        Column("WORKLOADS", lambda r: str(r.workloads)),
        Column("CQs", lambda r: str(r.cluster_queues)),
        Column("SHARDS", lambda r: str(r.shards)),
        Column("RUN FROM", lambda r: r.run_from, numeric=False),
        Column("WALL(s)", lambda r: number(r.wall_s, digits=1)),
        Column("VIRTUAL(s)", lambda r: number(r.virtual_makespan_s, digits=1)),
        Column("RATIO", lambda r: number(r.ratio, digits=2)),
        Column("USAGE%", lambda r: number(r.mean_usage_pct, digits=1)),
        Column("VIRTUAL-USAGE%", lambda r: number(r.virtual_mean_usage_pct, digits=1)),
        *(_admit_column(name) for name in classes),
        Column("HELD+ p50/p99(ms)", _held_beyond_run),
        Column("PREEMPTIONS", lambda r: str(r.preemptions)),
        Column("LOST", lambda r: str(r.lost)),
        Column("CPU(s)", lambda r: number(r.cpu_s.get("total", 0.0), digits=1)),
    ]
    notes = [note for row in rows for note in target_notes(row)]
    if any(row.scale != 1.0 for row in rows):
        notes.append("(counts scaled with --scale; the targets are for scale 1)")
    return render_table(columns, rows) + "\n" + "".join(f"{note}\n" for note in notes)


def not_valid(row: KueueLiveRow) -> str | None:
    """Why a row is not a measurement: with workloads lost, its wall time is the wait's end."""
    if row.lost == 0:
        return None
    return f"{row.config}: {row.lost} of {row.workloads} workloads never finished"


def _held_beyond_run(row: KueueLiveRow) -> str:
    """How much longer than its run time a workload held its quota (the virtual clock: 0)."""
    held = row.stages_ms.get("admitted->finished")
    return "-" if held is None else f"{number(held[0], digits=0)}/{number(held[1], digits=0)}"


def _admit_column(name: str) -> Column[KueueLiveRow]:
    def cell(row: KueueLiveRow) -> str:
        latency = row.admit.get(name)
        if latency is None or latency.p50_ms is None:
            return "-"
        return f"{number(latency.p50_ms, digits=0)}/{number(latency.p99_ms, digits=0)}"

    return Column(f"ADMIT-{name.upper()} p50/p99(ms)", cell)


def target_notes(row: KueueLiveRow) -> list[str]:
    def met(ok: bool) -> str:
        return "met" if ok else "MISSED"

    usage = row.mean_usage_pct
    return [
        f"{row.config}: wall <= {TARGET_RATIO:g}x the virtual makespan: "
        f"{met(row.ratio <= TARGET_RATIO)} ({number(row.ratio, digits=2)}x)",
        f"{row.config}: wall <= {TARGET_WALL_S:g} s (Kueue: {KUEUE_WALL_S:g} s): "
        f"{met(row.wall_s <= TARGET_WALL_S)} ({number(row.wall_s, digits=1)} s)",
        f"{row.config}: mean usage while work waits >= {TARGET_USAGE_PCT:g} %: "
        + ("met (no work ever waited)" if usage is None
           else f"{met(usage >= TARGET_USAGE_PCT)} ({number(usage, digits=1)} %)"),
        f"{row.config}: workloads lost = 0: {met(row.lost == 0)} ({row.lost})",
    ]  # fmt: skip
