"""`muster bench admission --pending`: many workloads queued before any quota frees.

One admission replica (shard 0 of 1) is driven as the service drives it: every event is stored
bytes decoded by the bus, consumed in batches through `Rounds.apply_batch` (facts into the
ledger and the engine, one round, decisions published, the `CompactLog` kept), with a publisher
that only numbers what it stores. Nothing but NATS is left out.

The load: 1 000 ClusterQueues (scaled, at least 10) in cohorts of 100, each with 4 cpu nominal,
no borrowing limit and no preemption, one LocalQueue `main` in a namespace of its own. First 4
one-cpu `running` workloads per ClusterQueue take every cpu; then `pending` workloads arrive
round-robin over the queues in three classes (1 cpu at priority 50, 2 at 100, 4 at 200), all of
which wait. Each row then measures, on that state:

- arrival: one more workload (a random queue and class) consumed alone, until its decision
  (Pending) is published: `apply_batch` of one event, p50/p99;
- release: one running workload finishes, consumed alone, until the next head it lets in is
  reserved and admitted (usually a 1-cpu head of the same queue), p50/p99;
- visibility: the replica's visibility keys rendered (`VisibilityRenderer`, as the service's
  loop does, without writing them), in CPU time: once in full after loading, as every render
  cost before renders were kept; then after each sampled arrival and each release, p50/p99, which
  re-renders only what the event changed (a release: its cohort's ClusterQueue statuses);
- gauges: one pass of Kueue's gauges (`queue_gauges`, as the service refreshes them with
  metrics on) after each sampled arrival, in CPU time, p50;
- rebuild: the replica's snapshot (`CompactLog.snapshot`, encoded as the service stores it) is
  decoded and replayed into a new replica, which takes ownership and decides once, as after a
  restart, inside `rebuilding()` as the service's is (no cyclic garbage collection until then).
  It runs in a new process, as a restarted replica does.

Each row loads in a child process of its own (`spawn`) and rebuilds in another, so resident
memory (RSS, from /proc) is the replica's and the interpreter's only: before loading (`base`),
after loading, after the rebuild, and the peak of either process. Samples of latency are taken
with `time.perf_counter()`; nothing is asserted on time.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import random
import resource
import time
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from muster.admission.handlers import Rounds
from muster.admission.rebuild import rebuilding, replay_event, restore
from muster.admission.snapshot import CompactLog, decode_snapshot, encode_snapshot
from muster.admission.state import AdmissionState
from muster.admission.visibility import VisibilityRenderer
from muster.bench.metrics import percentile
from muster.bench.table import Column, number, render_table
from muster.bus import BusError, decode, new_event
from muster.bus.partitions import token
from muster.bus.publisher import Fence
from muster.contracts.v1 import events_pb2 as pb
from muster.metrics.kueue_gauges import queue_gauges

SECTION = "admission"
KUEUE = "kueue.x-k8s.io/v1beta2"
PENDING_ROWS = (10_000, 100_000, 1_000_000)  # at scale 1
CLUSTER_QUEUES = 1000  # at scale 1
QUEUES_PER_COHORT = 100
NOMINAL_CPU = 4  # per ClusterQueue; as many one-cpu workloads run in it
CLASSES = ((1, 50), (2, 100), (4, 200))  # (cpu, priority) of the pending workloads
BATCH = 256  # events per apply_batch while loading: the consumer's fetch batch
SAMPLES = 1000  # arrivals and releases measured per row (fewer at small scale)
SEED = 19


class PendingRow(msgspec.Struct, frozen=True, kw_only=True):
    """One pending count's result; `-o json` prints exactly these fields."""

    section: str = SECTION
    case: str = "pending"
    pending: int
    cluster_queues: int
    cohorts: int
    running: int
    load_s: float  # consuming every workload, running and pending, until all are decided
    load_cpu_s: float  # the process's CPU time for it: the wall time less what others took
    loaded_per_s: float
    rss_base_mib: float  # the child process before loading: interpreter and imports
    rss_peak_mib: float  # the most it ever held, rebuild included
    rss_loaded_mib: float  # after loading
    arrival_p50_ms: float
    arrival_p99_ms: float
    arrival_cpu_p99_ms: float  # the replica's own CPU time: what the wall time is without load
    release_p50_ms: float
    release_p99_ms: float
    release_cpu_p99_ms: float
    render_full_ms: float  # every visibility key, rendered afresh (CPU, as the three below)
    render_arrival_p50_ms: float  # the render after one arrival
    render_arrival_p99_ms: float
    render_release_p99_ms: float  # after one release and the head it admits
    gauges_arrival_p50_ms: float  # a pass of Kueue's gauges after one arrival (CPU)
    samples: int  # arrivals, and releases, measured
    snapshot_mib: float  # as stored (zlib)
    snapshot_events: int
    rebuild_s: float  # decode the snapshot, replay it, take ownership and decide once
    rebuild_cpu_s: float
    rss_rebuilt_mib: float  # after the rebuild, the first replica dropped


def default_counts(scale: float) -> list[int]:
    return [max(1, round(n * scale)) for n in PENDING_ROWS]


def run(*, counts: list[int], scale: float) -> Iterator[PendingRow]:
    """One row per pending count, each measured in a child process of its own."""
    queues = max(10, round(CLUSTER_QUEUES * min(scale, 1.0)))
    context = multiprocessing.get_context("spawn")
    with context.Pool(1, maxtasksperchild=1) as pool:  # a new process per task
        for count in counts:
            loaded, data = pool.apply(measure_loaded, (count, queues))
            rebuild_s, rebuild_cpu_s, rss_rebuilt, peak = pool.apply(measure_rebuild, (data,))
            yield msgspec.structs.replace(
                loaded,
                rss_peak_mib=max(loaded.rss_peak_mib, peak),
                rebuild_s=rebuild_s,
                rebuild_cpu_s=rebuild_cpu_s,
                rss_rebuilt_mib=rss_rebuilt,
            )


def measure_loaded(pending: int, queues: int) -> tuple[PendingRow, bytes]:
    """Load `pending` workloads over `queues` ClusterQueues into a new replica and measure it
    (the rebuild's columns left at 0); and the snapshot it would store."""
    base = rss_mib()
    bench = Replica(queues)
    bench.configure()
    started, cpu = time.perf_counter(), time.process_time()
    bench.load_running()
    bench.load_pending(pending)
    load_s, load_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    loaded = rss_mib()
    samples = min(SAMPLES, max(10, pending // 10))
    full = bench.render()
    arrivals, arrival_renders, gauge_passes = bench.sample_arrivals(samples)
    releases, release_renders = bench.sample_releases(samples)
    data, events = bench.snapshot()
    total = queues * NOMINAL_CPU + pending
    row = PendingRow(
        pending=pending,
        cluster_queues=queues,
        cohorts=cohorts_of(queues),
        running=queues * NOMINAL_CPU,
        load_s=round(load_s, 3),
        load_cpu_s=round(load_cpu_s, 3),
        loaded_per_s=round(total / load_s, 1) if load_s > 0 else 0.0,
        rss_base_mib=round(base, 1),
        rss_peak_mib=round(peak_rss_mib(), 1),
        rss_loaded_mib=round(loaded, 1),
        arrival_p50_ms=ms(percentile(arrivals.wall, 50)),
        arrival_p99_ms=ms(percentile(arrivals.wall, 99)),
        arrival_cpu_p99_ms=ms(percentile(arrivals.cpu, 99)),
        release_p50_ms=ms(percentile(releases.wall, 50)),
        release_p99_ms=ms(percentile(releases.wall, 99)),
        release_cpu_p99_ms=ms(percentile(releases.cpu, 99)),
        render_full_ms=ms(full),
        render_arrival_p50_ms=ms(percentile(arrival_renders, 50)),
        render_arrival_p99_ms=ms(percentile(arrival_renders, 99)),
        render_release_p99_ms=ms(percentile(release_renders, 99)),
        gauges_arrival_p50_ms=ms(percentile(gauge_passes, 50)),
        samples=samples,
        snapshot_mib=round(len(data) / 2**20, 1),
        snapshot_events=events,
        rebuild_s=0.0,
        rebuild_cpu_s=0.0,
        rss_rebuilt_mib=0.0,
    )
    return row, data


def measure_rebuild(data: bytes) -> tuple[float, float, float, float]:
    """Rebuild a replica from snapshot `data` in this (new) process: wall and CPU seconds, RSS
    after it, and this process's peak RSS, MiB."""
    cpu = time.process_time()
    rebuild_s, rebuilt = rebuild(data)
    rebuild_cpu_s = time.process_time() - cpu
    rss_rebuilt = rss_mib()
    del rebuilt
    return (
        round(rebuild_s, 3),
        round(rebuild_cpu_s, 3),
        round(rss_rebuilt, 1),
        round(peak_rss_mib(), 1),
    )


def ms(seconds: float) -> float:
    return round(seconds * 1000, 4)


def cohorts_of(queues: int) -> int:
    return -(-queues // QUEUES_PER_COHORT)


class Latencies:
    """Samples of one kind, in wall and in CPU seconds."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)

    def sorted(self) -> Latencies:
        self.wall.sort()
        self.cpu.sort()
        return self


# --- the replica ---------------------------------------------------------------------------


class NumberingPublisher:
    """What the replica publishes through: each decision gets the next stream sequence and is
    dropped (the stream's copy is NATS's memory, not admission's)."""

    def __init__(self, stream: list[int]) -> None:
        self._stream = stream  # [last sequence], shared with the consumed side
        self.admitted: list[str] = []  # workloads admitted since the caller last cleared it

    async def publish(self, env: pb.Envelope, **_: object) -> int:
        if env.WhichOneof("payload") == "admitted":
            self.admitted.append(env.workload)
        self._stream[0] += 1
        return self._stream[0]

    async def publish_together(
        self, envs: Sequence[pb.Envelope], fences: Sequence[Fence | None]
    ) -> list[int | BusError]:
        return [await self.publish(env) for env in envs]

    async def dead_letter_unstored(self, env: pb.Envelope, *, consumer: str, reason: str) -> int:
        raise AssertionError(f"{env.type} for {env.workload} refused: {reason}")


class Replica:
    """A replica of the only shard and the events it consumes, made as the gateway makes them."""

    def __init__(self, queues: int) -> None:
        self.queues = queues
        self.state = AdmissionState()
        self.history = CompactLog(self.state.ledger)
        self.stream = [0]
        self.now_s = 0.0
        self.publisher = NumberingPublisher(self.stream)
        self.rounds = Rounds(
            self.state,
            self.publisher,
            clock=lambda: self.now_s,
            history=self.history,
        )
        self.loop = asyncio.new_event_loop()
        self.rng = random.Random(SEED)
        self.running: list[str] = []  # workloads holding quota, one cpu each
        self.arrived = 0
        self.renderer = VisibilityRenderer()

    def consume(self, envs: list[pb.Envelope]) -> None:
        """Store `envs` and apply them as one fetched batch: decoded by the bus from the bytes
        stored, each given its stream sequence, as the consumer does."""
        raw = [env.SerializeToString() for env in envs]
        decoded = [decode(data) for data in raw]
        for env in decoded:
            self.stream[0] += 1
            env.sequence = self.stream[0]
        self.loop.run_until_complete(self.rounds.apply_batch(decoded, raw))

    def configure(self) -> None:
        """The configuration, stored before the replica starts: it replays it, then owns."""
        objects = [flavor()]
        for q in range(self.queues):
            objects.append(cluster_queue(q))
            objects.append(local_queue(q))
        for obj in objects:
            env = applied(obj)
            self.stream[0] += 1
            env.sequence = self.stream[0]
            replay_event(self.state, env, history=self.history)
        self.state.take_ownership(now_s=self.now_s)

    def load_running(self) -> None:
        envs = []
        for q in range(self.queues):
            for i in range(NOMINAL_CPU):
                name = f"running-{i}"
                envs.append(self.submitted(q, name, cpu=1, priority=0))
                self.running.append(f"ns-{q}/{name}")
        for start in range(0, len(envs), BATCH):
            self.consume(envs[start : start + BATCH])

    def load_pending(self, count: int) -> None:
        batch: list[pb.Envelope] = []
        for n in range(count):
            cpu, priority = CLASSES[(n // self.queues) % len(CLASSES)]
            batch.append(self.submitted(n % self.queues, f"wl-{n}", cpu=cpu, priority=priority))
            if len(batch) == BATCH:
                self.consume(batch)
                batch = []
        if batch:
            self.consume(batch)
        self.arrived = count

    def sample_arrivals(self, samples: int) -> tuple[Latencies, list[float], list[float]]:
        """Seconds from consuming one new workload until its decision is published; and
        seconds to render the visibility keys after it, and to compute Kueue's gauges."""
        times, renders, gauges = Latencies(), [], []
        for _ in range(samples):
            cpu, priority = self.rng.choice(CLASSES)
            q = self.rng.randrange(self.queues)
            env = self.submitted(q, f"wl-{self.arrived}", cpu=cpu, priority=priority)
            self.arrived += 1
            times.add(*self.timed(env))
            renders.append(self.render())
            gauges.append(self.gauge_pass())
        return times.sorted(), sorted(renders), sorted(gauges)

    def sample_releases(self, samples: int) -> tuple[Latencies, list[float]]:
        """Seconds from consuming one running workload's `finished` until the head it lets in
        is admitted, and to render the visibility keys after it. A workload admitted so runs
        on and may be finished later."""
        times, renders = Latencies(), []
        for _ in range(samples):
            key = self.running.pop(self.rng.randrange(len(self.running)))
            self.publisher.admitted.clear()
            times.add(*self.timed(reported("finished", key, pb.WorkloadFinished())))
            self.running += [k for k in self.publisher.admitted if self.cpu_of(k) == 1]
            renders.append(self.render())
        return times.sorted(), sorted(renders)

    def render(self) -> float:
        """CPU seconds to render what changed of the visibility keys since the last render
        (CPU: the wall time of a few milliseconds is mostly other processes' on a loaded
        machine)."""
        cpu = time.thread_time()
        self.renderer.render(self.state.engine, self.state.sharding)
        return time.thread_time() - cpu

    def gauge_pass(self) -> float:
        """CPU seconds of one pass of Kueue's gauges over this replica's queues."""
        sharding = self.state.sharding
        cpu = time.thread_time()
        queue_gauges(
            self.state.engine,
            owns_tree=sharding.owns_tree,
            owns_local_queue=sharding.owns_local_queue,
        )
        return time.thread_time() - cpu

    def cpu_of(self, key: str) -> int:
        wl = self.state.ledger.entries[key].workload  # type: ignore[index]
        return sum(ps.requests.get("cpu", 0) * ps.count for ps in wl.pod_sets) // 1000

    def timed(self, env: pb.Envelope) -> tuple[float, float]:
        """Wall and CPU seconds to consume `env` alone."""
        self.now_s += 0.001
        started, cpu = time.perf_counter(), time.thread_time()
        self.consume([env])
        return time.perf_counter() - started, time.thread_time() - cpu

    def submitted(self, q: int, name: str, *, cpu: int, priority: int) -> pb.Envelope:
        manifest = workload(f"ns-{q}", name, cpu=cpu, priority=priority)
        partition = self.state.sharding.partition_of_local_queue(f"ns-{q}", "main")
        return new_event(
            "submitted",
            pb.WorkloadSubmitted(manifest_json=json.dumps(manifest)),
            cluster="local",
            workload=f"ns-{q}/{name}",
            generation=1,
            source="gateway",
            now_ns=int(self.now_s * 1e9),
            partition=token(partition),
        )

    def snapshot(self) -> tuple[bytes, int]:
        """The snapshot the service would store now, encoded; and how many events it holds."""
        snapshot = self.history.snapshot(sequence=self.state.last_sequence)
        return encode_snapshot(snapshot), len(snapshot.events)


def rebuild(data: bytes) -> tuple[float, AdmissionState]:
    """Seconds to rebuild a replica from snapshot `data`, as `AdmissionService.start` does when
    nothing was stored after it; and the rebuilt state."""
    started = time.perf_counter()
    with rebuilding():
        snapshot = decode_snapshot(data)
        state = AdmissionState()
        history = CompactLog(state.ledger)
        restore(state, snapshot, history=history, max_event_bytes=1 << 20)
        sequence = snapshot.sequence
        del snapshot  # as the service's `rebuild` returns: what the state needs, the log holds
        events = state.take_ownership(now_s=1.0)
        rounds = Rounds(state, NumberingPublisher([sequence]), clock=lambda: 1.0,
                        history=history)  # fmt: skip
        loop = asyncio.new_event_loop()
        loop.run_until_complete(rounds.catch_up(events, replay_end=sequence))
        loop.close()
    return time.perf_counter() - started, state


# --- objects, as Kueue manifests -----------------------------------------------------------


def flavor() -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default"}}


def cluster_queue(q: int) -> dict[str, Any]:
    quota = {"name": "cpu", "nominalQuota": str(NOMINAL_CPU)}
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": f"cq-{q}"},
        "spec": {
            "cohort": f"cohort-{q // QUEUES_PER_COHORT}",
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "default", "resources": [quota]}],
                }
            ],
        },
    }


def local_queue(q: int) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": "main", "namespace": f"ns-{q}"},
        "spec": {"clusterQueue": f"cq-{q}"},
    }


def workload(namespace: str, name: str, *, cpu: int, priority: int) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": {
            "queueName": "main",
            "priority": priority,
            "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }


def applied(manifest: dict[str, Any]) -> pb.Envelope:
    meta = manifest["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
    payload = pb.ConfigApplied(kind=manifest["kind"], name=name, manifest_json=json.dumps(manifest))
    return new_event("config_applied", payload, cluster="local", source="gateway", now_ns=0)


def reported(field: str, key: str, payload: Any) -> pb.Envelope:
    return new_event(field, payload, cluster="local", workload=key, source="binder")


# --- memory --------------------------------------------------------------------------------


def rss_mib() -> float:
    """This process's resident memory now, in MiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mib() -> float:
    """The most this process ever held resident, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- the table -----------------------------------------------------------------------------

TARGET_RSS_MIB = 3 * 1024  # at 1 000 000 pending
TARGET_ARRIVAL_P99_MS = 1.0
TARGET_REBUILD_S = 60.0


def render(rows: list[PendingRow]) -> str:
    columns: list[Column[PendingRow]] = [
        Column("PENDING", lambda r: str(r.pending)),
        Column("CQS", lambda r: str(r.cluster_queues)),
        Column("RUNNING", lambda r: str(r.running)),
        Column("SAMPLES", lambda r: str(r.samples)),
        Column("LOAD(s)", lambda r: number(r.load_s, digits=1)),
        Column("LOAD-CPU(s)", lambda r: number(r.load_cpu_s, digits=1)),
        Column("LOADED/s", lambda r: number(r.loaded_per_s, digits=0)),
        Column("RSS-BASE(MiB)", lambda r: number(r.rss_base_mib, digits=0)),
        Column("RSS-LOADED(MiB)", lambda r: number(r.rss_loaded_mib, digits=0)),
        Column("RSS-PEAK(MiB)", lambda r: number(r.rss_peak_mib, digits=0)),
        Column("RSS-REBUILT(MiB)", lambda r: number(r.rss_rebuilt_mib, digits=0)),
        Column("ARRIVAL-P50(ms)", lambda r: number(r.arrival_p50_ms)),
        Column("ARRIVAL-P99(ms)", lambda r: number(r.arrival_p99_ms)),
        Column("ARRIVAL-CPU-P99(ms)", lambda r: number(r.arrival_cpu_p99_ms)),
        Column("RELEASE-P50(ms)", lambda r: number(r.release_p50_ms)),
        Column("RELEASE-P99(ms)", lambda r: number(r.release_p99_ms)),
        Column("RELEASE-CPU-P99(ms)", lambda r: number(r.release_cpu_p99_ms)),
        Column("VIS-CPU-FULL(ms)", lambda r: number(r.render_full_ms)),
        Column("VIS-CPU-ARRIVAL-P50(ms)", lambda r: number(r.render_arrival_p50_ms)),
        Column("VIS-CPU-ARRIVAL-P99(ms)", lambda r: number(r.render_arrival_p99_ms)),
        Column("VIS-CPU-RELEASE-P99(ms)", lambda r: number(r.render_release_p99_ms)),
        Column("GAUGES-CPU-ARRIVAL-P50(ms)", lambda r: number(r.gauges_arrival_p50_ms)),
        Column("SNAPSHOT(MiB)", lambda r: number(r.snapshot_mib, digits=1)),
        Column("REBUILD(s)", lambda r: number(r.rebuild_s, digits=1)),
        Column("REBUILD-CPU(s)", lambda r: number(r.rebuild_cpu_s, digits=1)),
    ]
    notes = [
        f"{len(CLASSES)} classes of pending workloads over cohorts of {QUEUES_PER_COHORT} "
        f"ClusterQueues, {NOMINAL_CPU} cpu each, all taken by one-cpu running workloads; "
        "latencies of one event per round (CPU: the replica's own time, without the load "
        "of other processes); VIS: the CPU time of rendering the visibility keys, in full "
        "and after one arrival or release (not written)",
    ]
    for row in rows:
        if row.pending >= PENDING_ROWS[-1]:
            notes += target_notes(row)
    return render_table(columns, rows) + "\n" + "".join(f"{note}\n" for note in notes)


def target_notes(row: PendingRow) -> list[str]:
    def met(ok: bool) -> str:
        return "met" if ok else "MISSED"

    return [
        f"{row.pending} pending: RSS <= {TARGET_RSS_MIB} MiB: "
        f"{met(row.rss_peak_mib <= TARGET_RSS_MIB)} (loaded {number(row.rss_loaded_mib, digits=0)}"
        f", peak {number(row.rss_peak_mib, digits=0)}, "
        f"rebuilt {number(row.rss_rebuilt_mib, digits=0)})",
        f"{row.pending} pending: arrival p99 <= {TARGET_ARRIVAL_P99_MS:g} ms: "
        f"{met(row.arrival_p99_ms <= TARGET_ARRIVAL_P99_MS)} ({number(row.arrival_p99_ms)}; "
        f"CPU {number(row.arrival_cpu_p99_ms)})",
        f"{row.pending} pending: rebuild <= {TARGET_REBUILD_S:g} s: "
        f"{met(row.rebuild_s <= TARGET_REBUILD_S)} ({number(row.rebuild_s, digits=1)})",
    ]
