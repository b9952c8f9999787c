"""`muster bench chaos`: every service as its own process on a real nats-server, workloads that
queue and preempt, random SIGKILLs of every kind of service and nats-server restarts, then the
invariants of issue 20 checked from the event stream and from the cluster's own state.

A run submits the scenario's workloads (`chaos_scenario`) through `Gateway.Submit` at a steady
rate, retrying a call the gateway did not answer. With faults, one service at a time is killed
with SIGKILL, in a shuffled round so every kind is hit, and started again after
`restart_delay_s` with the same flags, as Kubernetes restarts a pod; the next is killed about
`kill_every_s` after it serves again (`chaos_faults`); nats-server is
restarted (same port, same store) at even points of the submissions. Faults stop
`fault_tail_s` after the last submission (or once all finished), once every kind was killed;
the run then drains.
Meanwhile this process follows the event stream (`EventBook`) and the cluster's watch
(`ClusterBook`), and watches for a service that exits without being killed. Once every
workload finished (or `timeout_s`), the row says what went wrong: lost (acknowledged, never in
the stream), stuck (not finished), twice (finished twice, admitted twice without an eviction
between, or more pods ran than were admitted), quota exceeded by admission's books or by the
pods on the nodes, nodes over-committed, services that exited on their own; and evictions and
wall time. With `Shapes` (admission checks this process answers, routing, big workloads whose
permits and evictions go in parts: `chaos_scenario`) also: admitted without a Ready check,
a workload's pods of two admissions bound at once, and an evicted admission's pods still bound
after its eviction was answered (`chaos_checks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import msgspec

from muster.bench.chaos_answers import CheckAnswers
from muster.bench.chaos_checks import ClusterBook, EventBook
from muster.bench.chaos_faults import Faults
from muster.bench.chaos_scenario import (
    BIG_PODS_EVENT_BYTES,
    PLAIN,
    ChaosGang,
    ChaosWorkload,
    Shapes,
    checked_queues,
    cohort_of,
    cohort_quota_milli,
    config_yaml,
    mixed,
    nodes,
)
from muster.bench.table import Column, render_table
from muster.bus import DLQ_STREAM, EVENTS_STREAM, Bus, BusConfig, connect
from muster.bus.service import run_loop
from muster.cluster.errors import ClusterError
from muster.cluster.keys import bucket_name
from muster.cluster.objects import admission_of
from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.launcher.nats_server import NatsServer, free_port
from muster.launcher.stack import SOLE_BINDERS_BOUND_EVENTS, SOLE_GATEWAYS_CLAIMS, Stack

SECTION = "chaos"
CLUSTER = "local"
# Writes kept per key of the simulated cluster's bucket (JetStream's most). The cluster's watch
# is level-triggered: a feed that resumes (nats-py's ordered consumer after a nats-server
# restart, or one that lagged) skips a write its key has since replaced. With one write per
# key, as the stack keeps it, `ClusterBook` then held a pod's state from before the gap while
# it read later writes: a pod that had ended and been made again looked still running on its
# old node, next to the pods placed there after it ended (seed 3's "node over-commit").
CLUSTER_HISTORY = 64
_RETRYABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL}
)


class ChaosConfig(msgspec.Struct, frozen=True, kw_only=True):
    workloads: int = 300
    gangs: int = 0  # of the workloads, gangs outside Kueue (chaos_scenario.ChaosGang)
    shapes: Shapes = PLAIN
    shards: int = 1
    faults: bool = True
    seed: int = 1
    speed: float = 20.0  # virtual seconds per real second, for the pods' run time
    submit_s: float = 20.0  # submissions spread over this long
    kill_every_s: float = 1.5
    restart_delay_s: float = 0.5
    nats_restarts: int = 1
    fault_tail_s: float = 15.0  # faults go on this long after the last submission
    evict_grace_s: float = 5.0  # preemption's --evict-grace-seconds
    timeout_s: float = 240.0  # for every workload to finish, from the first submission


class ChaosRow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    workloads: int
    gangs: int = 0
    shapes: str = "plain"  # Shapes.label
    shards: int
    faults: bool
    kills: dict[str, int]  # service -> SIGKILLs
    nats_restarts: int
    lost: int  # acknowledged by the gateway, never in the stream
    stuck: int  # in the stream, not finished in time
    twice: int  # finished twice, admitted twice without an eviction, or ran more pods
    books_over_quota: int  # events after which admission's books held more than a cohort's quota
    pods_over_quota: int  # cluster changes after which bound pods held more than a cohort's quota
    node_overcommits: int  # cluster changes after which a node held more than its cpu
    admitted_unready: int = 0  # admitted without a Ready answer of its checks
    two_places: int = 0  # cluster changes after which a workload's pods of two admissions ran
    left_running: int = 0  # completed evictions whose pods were still bound after the answer
    exits: list[str]  # services that exited without being killed
    first_breaches: list[str]  # the first time each bound was exceeded, where
    evictions: int
    permits_in_parts: int = 0  # permits published in parts (--big-pods)
    moves: int = 0  # routed to another ClusterQueue (--routing)
    moves_across: int = 0  # of those, into another cohort
    check_answers: dict[str, int] = {}  # --checks: the run's answers stored, by state
    dead_letters: int
    wall_s: float
    log_dir: str = ""  # kept when something went wrong

    @property
    def violations(self) -> int:
        return (
            self.lost
            + self.stuck
            + self.twice
            + self.books_over_quota
            + self.pods_over_quota
            + self.node_overcommits
            + self.admitted_unready
            + self.two_places
            + self.left_running
            + len(self.exits)
        )


async def run_chaos(config: ChaosConfig) -> ChaosRow:
    """One run; its log directory is removed unless something went wrong."""
    log_dir = Path(tempfile.mkdtemp(prefix="muster-chaos-"))
    nats = NatsServer(log_dir / "jetstream")
    url = await nats.start(log_path=log_dir / "nats-server.log")
    await keep_cluster_history(url)
    environment = {"PYTHONFAULTHANDLER": "1"}  # a crash in C code leaves its stack in the log
    if config.shapes.big_pods:
        environment["MUSTER_MAX_EVENT_BYTES"] = str(BIG_PODS_EVENT_BYTES)
    stack = Stack(
        nats_url=url,
        cluster=CLUSTER,
        shards=config.shards,
        speed=config.speed,
        log_dir=log_dir,
        service_args={"preemption": ["--evict-grace-seconds", f"{config.evict_grace_s:g}"]},
        gateway_listen=f"127.0.0.1:{free_port()}",
        name_claims=SOLE_GATEWAYS_CLAIMS,
        bound_events=SOLE_BINDERS_BOUND_EVENTS,
        environment=environment,
    )
    try:
        await stack.start()
        row = await _Run(config, stack, nats, url).go()
    finally:
        await stack.stop()
        await nats.stop()
    if row.violations:
        return msgspec.structs.replace(row, log_dir=str(log_dir))
    shutil.rmtree(log_dir, ignore_errors=True)
    return row


async def keep_cluster_history(url: str) -> None:
    """Make the simulated cluster's bucket, before any service opens it, keeping
    `CLUSTER_HISTORY` writes per key: every write the cluster's watch resumes after is still
    there to read, so `ClusterBook` judges each revision on the state the cluster had then."""
    bus = await connect(BusConfig(url=url, name="muster-chaos-setup", connect_timeout_s=10))
    try:
        await bus.kv(bucket_name(CLUSTER), history=CLUSTER_HISTORY)
    finally:
        await bus.close()


class _Run:
    def __init__(self, config: ChaosConfig, stack: Stack, nats: NatsServer, url: str) -> None:
        self.config = config
        self.stack = stack
        self.url = url
        load = mixed(config.workloads, gangs=config.gangs, seed=config.seed, shapes=config.shapes)
        self.load = {wl.key: wl for wl in load}
        queues = cohort_of()
        quota = cohort_quota_milli()
        self.checked = checked_queues(config.shapes)
        self.events = EventBook(cohort_of=queues, quota=quota, checked_queues=self.checked)
        self.cluster = ClusterBook(
            cohort_of_workload={
                k: queues[wl.cluster_queue] for k, wl in self.load.items() if wl.cluster_queue
            },
            quota=quota,
        )
        self.faults = Faults(stack, nats, rng=random.Random(config.seed), log_dir=stack.log_dir)
        self.acknowledged: set[str] = set()
        self.progress = asyncio.Event()
        self.last_sequence = 0  # of the events read
        self.read = asyncio.Event()  # set when an event was read

    async def go(self) -> ChaosRow:
        bus = await connect(BusConfig(url=self.url, name="muster-chaos", connect_timeout_s=10))
        backend = await SimBackend.connect(self.url, cluster=CLUSTER)
        answers = CheckAnswers(
            bus, cluster=CLUSTER, checked_queues=self.checked, rng=random.Random(self.config.seed)
        )
        try:
            for node in nodes():
                await backend.apply(node)
            async with asyncio.TaskGroup() as tasks:
                followers = [
                    tasks.create_task(self._follow_events(bus, backend, answers)),
                    tasks.create_task(self._follow_cluster(backend)),
                    tasks.create_task(self.faults.watch_exits()),
                ]
                started = time.monotonic()
                await self._run(started)
                wall_s = time.monotonic() - started
                await self._settle(bus, backend)
                for task in followers:
                    task.cancel()
            dead = (await bus.js.stream_info(DLQ_STREAM)).state.messages
        finally:
            await answers.close()
            await backend.close()
            await bus.close()
        return self._row(wall_s=wall_s, dead_letters=dead, answered=answers.answered)

    async def _run(self, started: float) -> None:
        async with grpc.aio.insecure_channel(self.stack.gateway_address) as channel:
            gateway = services_pb2_grpc.GatewayStub(channel)
            await _submit(gateway, config_yaml(self.config.shapes))
            chaos = None
            if self.config.faults:
                chaos = asyncio.create_task(
                    self.faults.run(
                        every_s=self.config.kill_every_s,
                        restart_delay_s=self.config.restart_delay_s,
                        nats_at_s=_nats_times(self.config),
                    )
                )
            try:
                await self._submit_all(gateway, started)
                faults_end = time.monotonic() + self.config.fault_tail_s
                await self._wait_finished(faults_end if chaos is not None else None)
                if chaos is not None:
                    # Restarts one at a time take longer on a loaded machine: the faults go on
                    # until every kind was hit (within the run's time).
                    left_s = max(0.0, started + self.config.timeout_s - time.monotonic())
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(left_s):
                            await self.faults.every_kind_killed.wait()
                    await _stopped(chaos)
                    await self.faults.restore()
                await self._wait_finished(started + self.config.timeout_s)
            finally:
                if chaos is not None:
                    await _stopped(chaos)
                await self.faults.restore()

    async def _submit_all(self, gateway: services_pb2_grpc.GatewayStub, started: float) -> None:
        step_s = self.config.submit_s / max(len(self.load), 1)
        for i, wl in enumerate(self.load.values()):
            delay = started + i * step_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await _submit(gateway, wl.manifest())
            self.acknowledged.add(wl.key)

    async def _wait_finished(self, deadline: float | None) -> None:
        """Until every workload finished, or `deadline` (monotonic; None: none)."""
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                while not self.load.keys() <= self.events.finished.keys():
                    self.progress.clear()
                    await self.progress.wait()

    async def _follow_events(self, bus: Bus, backend: SimBackend, answers: CheckAnswers) -> None:
        queues = cohort_of()
        async for env in bus.replay([">"], stream=EVENTS_STREAM, follow=True):
            completed = len(self.events.completed_evictions)
            self.events.apply(env)
            answers.read(env)
            for key, evicted in self.events.completed_evictions[completed:]:
                # Answered by now: its pods must be gone from the cluster as it is now.
                revision = await _current_revision(backend)
                self.cluster.expect_gone(key, before=evicted, revision=revision)
            if env.type == "workload.admitted":
                cohort = queues.get(env.admitted.admission.cluster_queue)
                if cohort is not None:
                    self.cluster.cohort_of_admission[env.sequence] = cohort
            self.last_sequence = env.sequence
            self.read.set()
            if env.type == "workload.finished":
                self.progress.set()

    async def _follow_cluster(self, backend: SimBackend) -> None:
        while True:
            changes = backend.watch(from_revision=self.cluster.revision)
            try:
                async with contextlib.aclosing(changes):
                    async for change in changes:
                        if change.kind == "Pod":  # its admission's cohort read first
                            await self._read_up_to(admission_of(change.obj))
                        self.cluster.apply(change)
            except ClusterError:  # NATS restarting: read on from the last revision
                await asyncio.sleep(0.2)

    async def _read_up_to(self, sequence: int) -> None:
        while self.last_sequence < sequence:
            self.read.clear()
            await self.read.wait()

    async def _settle(self, bus: Bus, backend: SimBackend) -> None:
        """Wait until both followers have read everything written so far (bounded)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30):
                end = await bus.last_sequence()
                revision = await backend.current_revision()
                while self.last_sequence < end or self.cluster.revision < revision:  # noqa: ASYNC110 - two followers, polled
                    await asyncio.sleep(0.05)  # both followers advance on their own

    def _may_run(self, key: str) -> int:
        """How many distinct pods of `key` may have run: a Kueue workload's admitted pods
        (each admission starts new ones), a gang's own pods (muster makes none)."""
        wl = self.load.get(key)
        return wl.pods if isinstance(wl, ChaosGang) else self.events.admissions.get(key, 0)

    def _row(self, *, wall_s: float, dead_letters: int, answered: dict[str, int]) -> ChaosRow:
        events, cluster = self.events, self.cluster
        twice = events.twice_admitted | events.finished_twice
        twice |= {k for k, uids in cluster.ran.items() if len(uids) > self._may_run(k)}
        # A gang outside Kueue has no `submitted` (nor `pods_pending` when its pods were placed
        # while the watcher was down): any event about it shows it arrived.
        gangs = {k for k, wl in self.load.items() if isinstance(wl, ChaosGang)}
        arrived = events.submitted | (events.named & gangs)
        return ChaosRow(
            workloads=len(self.load),
            gangs=self.config.gangs,
            shapes=self.config.shapes.label,
            shards=self.config.shards,
            faults=self.config.faults,
            kills=dict(sorted(self.faults.kills.items())),
            nats_restarts=self.faults.nats_restarts,
            lost=len(self.acknowledged - arrived),
            stuck=len(arrived & self.load.keys() - events.finished.keys()),
            twice=len(twice),
            books_over_quota=events.books.count,
            pods_over_quota=cluster.pods_outside_quota.count,
            node_overcommits=cluster.node_overcommit.count,
            admitted_unready=len(events.admitted_unready),
            two_places=cluster.two_places.count,
            left_running=cluster.left_running.count,
            exits=list(self.faults.exits),
            first_breaches=[
                f"{what}: {b.first}"
                for what, b in (
                    ("admission's books", events.books),
                    ("bound pods", cluster.pods_outside_quota),
                    ("node", cluster.node_overcommit),
                    ("two admissions' pods", cluster.two_places),
                    ("evicted pods left bound", cluster.left_running),
                )
                if b.first
            ],
            evictions=events.evictions,
            permits_in_parts=events.permits_in_parts,
            moves=events.moves,
            moves_across=events.moves_across,
            check_answers=dict(sorted(answered.items())),
            dead_letters=dead_letters,
            wall_s=round(wall_s, 1),
        )


async def _current_revision(backend: SimBackend) -> int:
    """The cluster's latest revision, waiting out a nats-server restart."""
    while True:
        try:
            return await backend.current_revision()
        except ClusterError:
            await asyncio.sleep(0.2)


async def _stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _submit(gateway: services_pb2_grpc.GatewayStub, manifest: str) -> None:
    """Submit until the gateway answers OK (it may be down, or NATS may be), retrying under
    one idempotency key as `muster submit` does: a retry of a call cut short is the same call."""
    request = services_pb2.SubmitRequest(manifest=manifest, idempotency_key=uuid.uuid4().hex)
    delay = 0.05
    while True:
        try:
            await gateway.Submit(request, timeout=10)
            return
        except grpc.aio.AioRpcError as err:
            if err.code() not in _RETRYABLE:
                raise
        await asyncio.sleep(delay)
        delay = min(1.0, delay * 2)


def _nats_times(config: ChaosConfig) -> list[float]:
    """Seconds into the run at which nats-server restarts: evenly inside the submissions."""
    n = config.nats_restarts
    return [config.submit_s * (i + 1) / (n + 1) for i in range(n)]


def run(
    *,
    scale: float,
    workloads: int,
    shards: int,
    seed: int,
    gangs: int = 0,
    shapes: Shapes = PLAIN,
    faults_only: bool = False,
) -> Iterator[ChaosRow]:
    """The same run without faults, then with: what the faults cost, and what they broke."""
    count = max(10, round(workloads * scale))
    submit_s = max(5.0, count / 15)
    base = ChaosConfig(
        workloads=count,
        gangs=round(gangs * count / max(workloads, 1)),
        shapes=msgspec.structs.replace(
            shapes, big_pods=round(shapes.big_pods * count / max(workloads, 1))
        ),
        shards=shards,
        seed=seed,
        submit_s=submit_s,
        kill_every_s=2.5,
        nats_restarts=2,
        timeout_s=120 + 4 * submit_s,
    )
    for faults in (True,) if faults_only else (False, True):
        yield run_loop(run_chaos(msgspec.structs.replace(base, faults=faults)))


def render(rows: list[ChaosRow]) -> str:
    columns: list[Column[ChaosRow]] = [
        Column("FAULTS", lambda r: "yes" if r.faults else "no", numeric=False),
        Column("WORKLOADS", lambda r: str(r.workloads)),
        Column("GANGS", lambda r: str(r.gangs)),
        Column("SHAPES", lambda r: r.shapes, numeric=False),
        Column("SHARDS", lambda r: str(r.shards)),
        Column("KILLS", lambda r: str(sum(r.kills.values()))),
        Column("NATS RESTARTS", lambda r: str(r.nats_restarts)),
        Column("LOST", lambda r: str(r.lost)),
        Column("STUCK", lambda r: str(r.stuck)),
        Column("TWICE", lambda r: str(r.twice)),
        Column("BOOKS>QUOTA", lambda r: str(r.books_over_quota)),
        Column("PODS>QUOTA", lambda r: str(r.pods_over_quota)),
        Column("NODE>CPU", lambda r: str(r.node_overcommits)),
        Column("UNREADY", lambda r: str(r.admitted_unready)),
        Column("TWO PLACES", lambda r: str(r.two_places)),
        Column("LEFT BOUND", lambda r: str(r.left_running)),
        Column("EXITS", lambda r: str(len(r.exits))),
        Column("EVICTIONS", lambda r: str(r.evictions)),
        Column("PERMITS IN PARTS", lambda r: str(r.permits_in_parts)),
        Column("MOVES", lambda r: f"{r.moves} ({r.moves_across} across)"),
        Column("WALL s", lambda r: f"{r.wall_s:g}"),
    ]
    kills = [
        f"kills ({'yes' if r.faults else 'no'} faults): "
        + ", ".join(f"{name} {n}" for name, n in r.kills.items())
        for r in rows
        if r.kills
    ]
    notes = [
        f"check answers ({'yes' if r.faults else 'no'} faults): "
        + ", ".join(f"{state} {n}" for state, n in r.check_answers.items())
        for r in rows
        if r.check_answers
    ]
    notes += [f"exit: {e}" for r in rows for e in r.exits]
    notes += [f"first breach: {b}" for r in rows for b in r.first_breaches]
    notes += [f"logs kept in {r.log_dir}" for r in rows if r.log_dir]
    return (
        render_table(columns, rows)
        + "".join(f"\n{line}" for line in [*kills, *notes])
        + ("\n" if kills or notes else "")
    )


__all__ = [
    "CLUSTER",
    "ChaosConfig",
    "ChaosGang",
    "ChaosRow",
    "ChaosWorkload",
    "Shapes",
    "keep_cluster_history",
    "render",
    "run",
    "run_chaos",
]
