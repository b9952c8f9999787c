"""`muster bench e2e`: workloads through NATS and every service process, on the sim cluster.

Each case starts a fresh loopback nats-server and the same service processes `muster run` starts,
with N admission shards over 8 independent ClusterQueues (8 cohort trees, so shards split the
work), quota and nodes large enough that nothing waits for capacity: what is measured is the
pipeline. Workloads (one pod, 100m cpu) are submitted through `Gateway.Submit`:
- burst: all at once, 64 calls in flight, one workload per call; throughput = workloads /
  (last admitted − first submit). Three times the rate case's count, so that the warm-up
  (first connections, caches, the interpreter specialising) weighs little in it;
- burst with 16 workloads per call (a multi-document manifest): the same pipeline with a
  sixteenth of the gRPC calls, which tells the cost of the calls from the rest;
- rate: paced at a fixed rate, one workload per call; latency percentiles are the point.
A Submit the gateway refuses for its limit on calls in flight (a paced case on a loaded machine)
is sent again after a backoff, as a client should; `REFUSED` counts them (`bench.refusals`).
Each workload is written as YAML (what `muster submit -f` sends), or with `--manifest json` as
one JSON object per workload (what kubectl and programs send; a call of 16 sends a `List`).
- with one shard and more in the run, the lone replica is also paced at the rate each of N
  replicas sees (200 ÷ N per second), and the machine's charge for waking a process that rarely
  (`bench.wake`) is measured: `bench.replicas` sets each row at N shards beside both.
Latency = the admission/watcher event's own timestamp (`Envelope.time_unix_nano`, same host clock)
minus the moment the client started the Submit call. CPU = user + system time each process
(every service, nats-server, and this client) used while the workloads went through, per
workload: on 2 shared cores, their sum is what bounds throughput. "Went through" ends once
every workload is admitted and running (the watcher published `running`, after the sim
kubelet started its pod on its node), so the per-cluster services' work that lags behind
admission is counted too. BOUND counts, and its latency ends at, that `running`: the pods run
on their nodes, what a user means by bound (the binder's own `bound` is not told for pods
created on their nodes under the launchers' `--bound-events binds`; rows before this counted
`bound`, and say so in `bound_event`). The client only polls the stream's per-subject counts
meanwhile, and reads the events' times once all went through (`Events.Watch`, not following):
watching live would make the gateway and the client compete with what is measured.

`--observe` runs each case with observability `off` (the default), `on` (every service serves
/metrics; tracing as configured by default: no exporter, so no spans) and `otlp` (the same, and
every service exports spans over OTLP/HTTP to a receiver in this process that counts them), in
that order per case, so that their rows can be compared.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path

import grpc
import msgspec
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from muster.bench import connz, replicas, round_counts, wake
from muster.bench.jetstream import publish_ack_rate
from muster.bench.refusals import Refusals
from muster.bench.sim_nodes import node_manifests
from muster.bench.table import Column, render_table
from muster.bench.wire import per_consumer, per_workload, wire_count
from muster.bus.buckets import PARTITIONS_BUCKET
from muster.bus.service import run_loop
from muster.bus.subjects import EVENTS_STREAM, workload_subject
from muster.cluster.sim.backend import SimBackend
from muster.contracts.v1 import services_pb2, services_pb2_grpc
from muster.devtools.otlp import OtlpReceiver
from muster.launcher.cpu_time import cpu_s
from muster.launcher.nats_server import NatsServer
from muster.launcher.stack import SOLE_BINDERS_BOUND_EVENTS, SOLE_GATEWAYS_CLAIMS, Stack

SECTION = "e2e"
QUEUES = 8
IN_FLIGHT = 64
WARM_UP = "bench/warm-up"
CLUSTER = "local"
# A workload went through once it has both: its pods run on their nodes, so they were bound
# (`bound` itself is not waited for: a binder with `--bound-events binds` tells none).
DONE = ("admitted", "running")
BOUND_EVENT = "running"  # what BOUND counts (see the module docstring)
POLL_S = 0.02
# For the warm-up workload: on an idle machine it goes through in well under a second, at a
# load of 30 its first events wait for every service's first connections and caches.
WARM_UP_S = 300.0
BATCHED_PER_CALL = 16  # workloads per Submit in the batched burst
OBSERVE = ("off", "on", "otlp")  # metrics and tracing: see the module docstring
MANIFESTS = ("yaml", "json")  # how the client writes each Submit's workloads


class E2ERow(msgspec.Struct, frozen=True, kw_only=True):
    section: str = SECTION
    mode: str  # "burst" or "rate"
    shards: int
    workloads: int
    per_call: int  # workloads per Submit call
    offered_per_s: float | None  # the paced rate; None for a burst
    admitted: int
    bound: int
    throughput_per_s: float  # admitted per second, first submit to last admission
    admit_p50_ms: float
    admit_p99_ms: float
    bound_p50_ms: float
    bound_p99_ms: float
    cpu_ms_per_workload: dict[str, float]  # process -> CPU ms per workload, "total" included
    # The workload event `bound` and its latencies count: `running` (BOUND_EVENT); rows written
    # before it was said counted the binder's `bound`.
    bound_event: str = "bound"
    observe: str = "off"  # metrics and tracing: off, on (no exporter), otlp
    manifest: str = "yaml"  # how the client wrote the workloads: yaml or json
    spans_exported: int = 0  # OTLP requests received (otlp only)
    events_per_workload: float = 0.0  # workload events stored per workload submitted
    jetstream_acks_per_s: float = 0.0  # the same server's own publish+ack rate (jetstream.py)
    # Messages JetStream stored (each with its PubAck) and delivered per workload, per stream
    # and "total" (`bench.wire`).
    stored_per_workload: dict[str, float] = msgspec.field(default_factory=dict)
    delivered_per_workload: dict[str, float] = msgspec.field(default_factory=dict)
    # The same deliveries per consumer (`wire.consumer_label`), and the workload events stored
    # per workload by event type: who receives what (docs/benchmarks.md, "Messages per workload").
    delivered_by_consumer: dict[str, float] = msgspec.field(default_factory=dict)
    stored_by_event: dict[str, float] = msgspec.field(default_factory=dict)
    # Submits the gateway refused for its limit on calls in flight, each sent again after a
    # backoff (`bench.refusals`): their wait is in the latencies and the throughput.
    refused: int = 0
    # Per process, every message its connections sent (in) and received (out) per workload,
    # bytes too, and what they received by kind (`bench.connz`): beyond the stored and delivered.
    connz_per_workload: dict[str, dict[str, float]] = msgspec.field(default_factory=dict)
    # Processes gone before the case ended (an admission replica that lost its lease, say):
    # their CPU and their work are missing, so the row is not valid.
    ended: tuple[str, ...] = ()
    # The admission replicas' rounds (that decided) per replica, the facts each applied, and
    # their view writes per second per replica (`bench.round_counts`); None with metrics off.
    rounds: round_counts.PerReplica | None = None

    @property
    def valid(self) -> bool:
        return not self.ended

    @property
    def jetstream_share(self) -> float:
        """The part of that rate muster's events take at the row's throughput."""
        used = self.events_per_workload * self.throughput_per_s
        return used / self.jetstream_acks_per_s if self.jetstream_acks_per_s else 0.0


_QUEUE = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cq-{q}}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources: [{{name: cpu, nominalQuota: 100k}}, {{name: memory, nominalQuota: 100Ti}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: bench, name: lq-{q}}}
spec: {{clusterQueue: cq-{q}}}"""

_WORKLOAD = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  namespace: bench
  name: {name}
  annotations: {{muster.dev/run-seconds: "3600"}}
spec:
  queueName: lq-{q}
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers: [{{name: c, resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}}}]
"""


def config_yaml() -> str:
    flavor = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: default}"
    return "\n---\n".join([flavor, *(_QUEUE.format(q=q) for q in range(QUEUES))])


def workload_yaml(i: int, *, name: str | None = None) -> str:
    return _WORKLOAD.format(name=name or f"w-{i}", q=i % QUEUES)


def workload_json(i: int, *, name: str | None = None) -> dict[str, object]:
    """The workload of `workload_yaml`, as the object a JSON manifest holds."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "namespace": "bench",
            "name": name or f"w-{i}",
            "annotations": {"muster.dev/run-seconds": "3600"},
        },
        "spec": {
            "queueName": f"lq-{i % QUEUES}",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "c", "resources": {"requests": _REQUESTS}},
                            ]
                        }
                    },
                }
            ],
        },
    }


_REQUESTS = {"cpu": "100m", "memory": "64Mi"}
_ENCODE_JSON = msgspec.json.Encoder()


def manifest_of(workloads: range, manifest: str, *, prefix: str = "w") -> str:
    """One Submit's manifest of `workloads` (named `<prefix>-<i>`): YAML documents, or one JSON
    object (a `List` of more than one)."""
    if manifest == "yaml":
        return "\n---\n".join(workload_yaml(i, name=f"{prefix}-{i}") for i in workloads)
    items = [workload_json(i, name=f"{prefix}-{i}") for i in workloads]
    document = items[0] if len(items) == 1 else {"apiVersion": "v1", "kind": "List", "items": items}
    return _ENCODE_JSON.encode(document).decode()


def nodes(workloads: int) -> list[dict[str, object]]:
    count = max(4, workloads // 200 + 1)
    return node_manifests(count, cpu=64, memory="256Gi", pods=250, digits=3)


# The processes of the CPU table, in pipeline order; admission shards are summed.
CPU_PROCESSES = (
    "gateway",
    "admission",
    "preemption",
    "binder",
    "gangpermit",
    "watcher",
    "sim-cluster",
    "nats-server",
    "client",
    "total",
)


def cpu_meter(pids: Mapping[str, int]) -> Callable[[], dict[str, float]]:
    """A function returning CPU seconds so far per process of `pids`, plus this "client"."""

    def read() -> dict[str, float]:
        used: dict[str, float] = {"client": time.process_time()}
        for name, pid in pids.items():
            label = "admission" if name.startswith("admission-") else name
            try:
                used[label] = used.get(label, 0.0) + cpu_s(pid)
            except (OSError, IndexError, ValueError):  # gone, or not Linux: not counted
                continue
        return used

    return read


def cpu_per_workload(
    before: Mapping[str, float], after: Mapping[str, float], workloads: int
) -> dict[str, float]:
    """CPU ms per workload per process between two `cpu_meter` readings, and their total."""
    spent = {k: (after[k] - before.get(k, 0.0)) * 1000 / max(workloads, 1) for k in after}
    spent["total"] = sum(spent.values())
    return {k: round(v, 2) for k, v in spent.items()}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def observed(observe: str, receiver: OtlpReceiver | None) -> dict[str, str] | None:
    """The services' environment for `observe` (None: as ours)."""
    if observe == "off":
        return None
    env = {"MUSTER_METRICS_PORT": "0"}
    if receiver is not None:
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
    return env


async def run_case(
    *,
    shards: int,
    workloads: int,
    rate_per_s: float | None,
    per_call: int = 1,
    observe: str = "off",
    manifest: str = "yaml",
) -> E2ERow:
    if observe not in OBSERVE:
        raise ValueError(f"observe must be one of {', '.join(OBSERVE)}, got {observe!r}")
    if manifest not in MANIFESTS:
        raise ValueError(f"manifest must be one of {', '.join(MANIFESTS)}, got {manifest!r}")
    log_dir = Path(tempfile.mkdtemp(prefix="muster-bench-e2e-"))
    nats = NatsServer(log_dir / "jetstream", monitor=True)
    url = await nats.start(log_path=log_dir / "nats-server.log")
    receiver = OtlpReceiver(keep=False).start() if observe == "otlp" else None
    stack = Stack(
        nats_url=url,
        cluster="local",
        shards=shards,
        speed=1.0,
        log_dir=log_dir,
        name_claims=SOLE_GATEWAYS_CLAIMS,
        bound_events=SOLE_BINDERS_BOUND_EVENTS,
        environment=observed(observe, receiver),
    )
    try:
        await stack.start()
        backend = await SimBackend.connect(url, cluster="local")
        for node in nodes(workloads):
            await backend.apply(node)
        await backend.close()
        pids = {s.name: s.process.pid for s in stack.services if s.process is not None}
        if nats.process is not None:
            pids["nats-server"] = nats.process.pid
        meter = cpu_meter(pids)
        nc = NatsClient()
        await nc.connect(url, name="muster-bench")
        try:
            row = await _measure(
                stack.gateway_address,
                nc.jetstream(),
                Load(
                    shards=shards,
                    workloads=workloads,
                    rate_per_s=rate_per_s,
                    per_call=per_call,
                    manifest=manifest,
                ),
                meter,
                traffic=functools.partial(connz.read_traffic, nats.monitor_url or "", pids),
                rounds=functools.partial(
                    round_counts.read,
                    round_counts.metrics_addresses({s.name: s.addresses for s in stack.services}),
                ),
            )
            ended = tuple(
                s.name
                for s in stack.services
                if s.process is None or s.process.returncode is not None
            )
            if nats.process is None or nats.process.returncode is not None:
                ended += ("nats-server",)
            row = msgspec.structs.replace(row, ended=ended)
            # The yardstick, once the services are idle again.
            acks = await publish_ack_rate(nc.jetstream())
            row = msgspec.structs.replace(row, jetstream_acks_per_s=round(acks))
        finally:
            await nc.close()
    finally:
        await stack.stop()
        await nats.stop()
        if receiver is not None:
            receiver.stop()
    row = msgspec.structs.replace(
        row,
        observe=observe,
        manifest=manifest,
        spans_exported=0 if receiver is None else receiver.requests,
    )
    # Kept when the case failed (the error names it); a finished case leaves nothing behind:
    # its JetStream store is megabytes per case.
    shutil.rmtree(log_dir, ignore_errors=True)
    return row


async def stored_counts(js: JetStreamContext, *, named: bool = True) -> dict[str, int]:
    """How many events of each workload event type the cluster's subjects hold so far;
    `named`: with the `submitted` stored on their names' subjects, one subject each (a poll
    that waits for other events leaves them out: the server would list every name)."""
    base = workload_subject(CLUSTER, ">")[:-1]  # up to the event's token
    # Without and with the partition token (docs/events.md, "Partitions"), and with a name.
    filters = [f"{base}*", f"{base}*.*", *([f"{base}submitted.*.>"] if named else [])]
    counts: dict[str, int] = {}
    for subjects_filter in filters:
        info = await js.stream_info(EVENTS_STREAM, subjects_filter=subjects_filter)
        for subject, count in (info.state.subjects or {}).items():
            event = subject[len(base) :].split(".", 1)[0]
            counts[event] = counts.get(event, 0) + count
    return counts


async def wait_stored(js: JetStreamContext, count: int, *, timeout_s: float) -> bool:
    """True once `count` workloads are admitted and running; False after `timeout_s`
    (a case's row then shows how many made it)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            # Polled: the counts live in the server, which notifies no one of them.
            while went_through(await stored_counts(js, named=False)) < count:  # noqa: ASYNC110
                await asyncio.sleep(POLL_S)
            return True
    return False


async def wait_partitions_told(js: JetStreamContext, queues: int, *, timeout_s: float) -> bool:
    """True once `MUSTER_PARTITIONS` holds `queues` LocalQueues' partitions and every follower
    of the bucket (the gateway's, the watcher's) was handed all of it; False after `timeout_s`.

    Admission writes them with its views, which may come after the warm-up workload went
    through: a burst started before would store its first workloads in their LocalQueues'
    stand-in partitions, each then forwarded home (admission/forwarding.py), which is the
    cost of a configuration's first moments, not of a workload's.
    """
    stream = f"KV_{PARTITIONS_BUCKET}"
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            while True:  # polled, as `wait_stored`
                info = await js.stream_info(stream, subjects_filter=">")
                last = info.state.last_seq
                told = all(
                    c.delivered is not None and (c.delivered.stream_seq or 0) >= last
                    for c in await js.consumers_info(stream)
                )
                if len(info.state.subjects or {}) >= queues and told:
                    return True
                await asyncio.sleep(POLL_S)
    return False


def went_through(counts: Mapping[str, int]) -> int:
    """How many workloads the per-type event counts say are admitted and running."""
    return min(counts.get(e, 0) for e in DONE)


async def event_times(events: services_pb2_grpc.EventsStub, event_type: str) -> dict[str, int]:
    """Workload -> `time_unix_nano` of its first event of `event_type`, from the stored events."""
    request = services_pb2.WatchRequest(
        from_sequence=1, types=[f"workload.{event_type}"], history_only=True
    )
    times: dict[str, int] = {}
    async for env in events.Watch(request):
        times.setdefault(env.workload, env.time_unix_nano)
    return times


class Load(msgspec.Struct, frozen=True, kw_only=True):
    """What a case submits: `workloads` in calls of `per_call`, at `rate_per_s` (None: burst)."""

    shards: int
    workloads: int
    rate_per_s: float | None
    per_call: int = 1
    manifest: str = "yaml"  # MANIFESTS


async def _measure(
    gateway: str,
    js: JetStreamContext,
    load: Load,
    meter: Callable[[], dict[str, float]],
    *,
    traffic: connz.TrafficReader,
    rounds: Callable[[], Awaitable[round_counts.RoundCounts]],
) -> E2ERow:
    submitted: dict[str, int] = {}
    refusals = Refusals()
    async with grpc.aio.insecure_channel(gateway) as channel:
        gw = services_pb2_grpc.GatewayStub(channel)
        await gw.Submit(services_pb2.SubmitRequest(manifest=config_yaml()))
        # One workload first: once it runs, the configuration has reached every shard and
        # every per-cluster service has started.
        await gw.Submit(services_pb2.SubmitRequest(manifest=workload_yaml(0, name="warm-up")))
        if not await wait_stored(js, 1, timeout_s=WARM_UP_S):
            raise RuntimeError(f"the warm-up workload did not go through in {WARM_UP_S:g}s")
        if not await wait_partitions_told(js, QUEUES, timeout_s=WARM_UP_S):
            raise RuntimeError(f"the LocalQueues' partitions were not told in {WARM_UP_S:g}s")
        counts_before = await stored_counts(js)
        wire_before = await wire_count(js)
        traffic_before = await traffic()
        rounds_before = await rounds()
        cpu_before = meter()
        start = time.monotonic()

        async def submit(first: int) -> None:
            batch = range(first, min(first + load.per_call, load.workloads))
            manifest = manifest_of(batch, load.manifest)
            now = time.time_ns()
            for i in batch:
                submitted[f"bench/w-{i}"] = now
            request = services_pb2.SubmitRequest(manifest=manifest)
            await refusals.call(lambda: gw.Submit(request))

        firsts = iter(range(0, load.workloads, load.per_call))
        if load.rate_per_s is None:  # IN_FLIGHT callers, each taking the next call's workloads

            async def caller() -> None:
                for first in firsts:
                    await submit(first)

            await asyncio.gather(*(caller() for _ in range(IN_FLIGHT)))
        else:  # paced: each call when its time comes, however long the others take
            tasks = []
            for first in firsts:
                delay = start + first / load.rate_per_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(submit(first)))
            await asyncio.gather(*tasks)
        # With the warm-up workload.
        await wait_stored(js, load.workloads + 1, timeout_s=60 + load.workloads / 20)
        cpu_after = meter()
        window_s = time.monotonic() - start
        rounds_spent = await rounds() - rounds_before
        wire_after = await wire_count(js)
        traffic_after = await traffic()
        wire = per_workload(wire_before, wire_after, load.workloads)
        counts_after = await stored_counts(js)
        by_event = {
            e: round((n - counts_before.get(e, 0)) / load.workloads, 2)
            for e, n in sorted(counts_after.items())
            if n > counts_before.get(e, 0)
        }
        stored = sum(counts_after.values()) - sum(counts_before.values())
        # Read once everything went through: a live watch would compete with the services.
        events = services_pb2_grpc.EventsStub(channel)
        admitted = await event_times(events, "admitted")
        bound = await event_times(events, BOUND_EVENT)
    admit_ms = [(admitted[k] - t) / 1e6 for k, t in submitted.items() if k in admitted]
    bound_ms = [(bound[k] - t) / 1e6 for k, t in submitted.items() if k in bound]
    first = min(submitted.values())
    last = max((admitted[k] for k in submitted if k in admitted), default=first)
    return E2ERow(
        mode="burst" if load.rate_per_s is None else "rate",
        shards=load.shards,
        workloads=load.workloads,
        per_call=load.per_call,
        offered_per_s=load.rate_per_s,
        admitted=len(admit_ms),
        bound=len(bound_ms),
        bound_event=BOUND_EVENT,
        throughput_per_s=round(len(admit_ms) / max((last - first) / 1e9, 1e-9), 1),
        admit_p50_ms=round(percentile(admit_ms, 0.50), 1),
        admit_p99_ms=round(percentile(admit_ms, 0.99), 1),
        bound_p50_ms=round(percentile(bound_ms, 0.50), 1),
        bound_p99_ms=round(percentile(bound_ms, 0.99), 1),
        cpu_ms_per_workload=cpu_per_workload(cpu_before, cpu_after, load.workloads),
        events_per_workload=round(stored / load.workloads, 2),
        stored_per_workload=wire[0],
        delivered_per_workload=wire[1],
        delivered_by_consumer=per_consumer(wire_before, wire_after, load.workloads),
        stored_by_event=by_event,
        connz_per_workload=connz.per_workload(traffic_before, traffic_after, load.workloads),
        refused=refusals.count,
        rounds=round_counts.per_replica(rounds_spent, replicas=load.shards, seconds=window_s)
        if rounds_spent.rounds
        else None,
    )


RATE_PER_S = 200.0  # the paced case's rate


def run(
    *,
    scale: float,
    shard_counts: tuple[int, ...] = (1, 2, 4),
    observe: tuple[str, ...] = ("off",),
    manifest: str = "yaml",
) -> Iterator[msgspec.Struct]:
    """The e2e rows, case by case; with a lone replica and more, then the machine's wake
    costs (`bench.wake`) and the per-replica comparison (`bench.replicas`)."""
    count = max(10, round(1000 * scale))
    rows: list[E2ERow] = []
    for load in loads(shard_counts, count):
        for mode in observe:  # side by side, so that drift on the machine weighs alike
            row = run_loop(
                run_case(
                    shards=load.shards,
                    workloads=load.workloads,
                    rate_per_s=load.rate_per_s,
                    per_call=load.per_call,
                    observe=mode,
                    manifest=manifest,
                )
            )
            rows.append(row)
            yield row
    paces = replicas.paced_loads(shard_counts, RATE_PER_S)
    if not paces:
        return
    # After the cases, with no service running: the machine's own charge, nothing else's.
    wakes = [wake.measure(rate, seconds=3 * scale) for rate in (RATE_PER_S, *paces)]
    yield from wakes
    # A row missing a process would compare a fraction of the work.
    yield from replicas.compare([r for r in rows if r.observe == observe[0] and r.valid], wakes)


def loads(shard_counts: tuple[int, ...], count: int) -> list[Load]:
    """Per shard count: two bursts and the paced case; the lone replica also at each pace a
    replica of N sees (`replicas.paced_loads`)."""
    out: list[Load] = []
    for shards in shard_counts:
        # The client on the services' loop (uvloop when installed): it shares their 2 cores.
        out += [
            Load(shards=shards, workloads=3 * count, rate_per_s=None, per_call=per_call)
            for per_call in (1, BATCHED_PER_CALL)
        ]
        paces = replicas.paced_loads(shard_counts, RATE_PER_S) if shards == 1 else []
        out += [
            Load(shards=shards, workloads=count, rate_per_s=rate) for rate in (RATE_PER_S, *paces)
        ]
    return out


def render(rows: list[msgspec.Struct]) -> str:
    """The latency table, then CPU ms per workload by process for the same rows; then the
    per-replica comparison and the machine's wake costs when the run has them."""
    cases = [r for r in rows if isinstance(r, E2ERow)]
    text = render_latency(cases) + "\n" + render_cpu(cases) + "\n" + render_wire(cases)
    text += "\n" + connz.render([(_title(i, r), r.connz_per_workload) for i, r in enumerate(cases)])
    text += render_not_valid(cases)
    compared = [r for r in rows if isinstance(r, replicas.ReplicaRow)]
    wakes = [r for r in rows if isinstance(r, wake.WakeRow)]
    if compared:
        text += "\n" + replicas.render(compared)
    if wakes:
        text += "\n" + replicas.render_wake(wakes)
    return text


def render_not_valid(rows: list[E2ERow]) -> str:
    """A line per row that is not valid (ENDED in its tables), naming what ended."""
    return "".join(f"\nNOT VALID: {why}\n" for why in map(not_valid, rows) if why)


def not_valid(row: msgspec.Struct) -> str | None:
    """Why a case's row is not valid (a process ended during it), naming the case; None for a
    valid row and for the rows that are not cases (wake costs, the per-replica comparison)."""
    if not isinstance(row, E2ERow) or row.valid:
        return None
    return (
        f"{row.mode} {row.per_call}/call {row.shards} shard(s), {row.workloads} workloads: "
        f"{', '.join(row.ended)} ended during the case; its CPU and work are missing"
    )


def _ended_column() -> Column[E2ERow]:
    return Column("ENDED", lambda r: ",".join(r.ended) or "-", numeric=False)


def render_cpu(rows: list[E2ERow]) -> str:
    columns: list[Column[E2ERow]] = [
        Column("CPU ms/workload", lambda r: r.mode, numeric=False),
        Column("OBSERVE", lambda r: r.observe, numeric=False),
        Column("MANIFEST", lambda r: r.manifest, numeric=False),
        Column("SHARDS", lambda r: str(r.shards)),
        Column("WORKLOADS", lambda r: str(r.workloads)),
        Column("PER CALL", lambda r: str(r.per_call)),
        *(_cpu_column(name) for name in CPU_PROCESSES),
        *_round_columns(),
        _ended_column(),
    ]
    return render_table(columns, rows)


def render_wire(rows: list[E2ERow]) -> str:
    """Per workload, each case's stored workload events by type (`stored <type>`) and each
    consumer's deliveries (`<stream> <consumer>`), one column per case."""
    keys = sorted(
        {f"stored {e}" for r in rows for e in r.stored_by_event}
        | {k for r in rows for k in r.delivered_by_consumer if k != "total"}
    )

    def value(row: E2ERow, key: str) -> str:
        if key.startswith("stored "):
            return f"{row.stored_by_event.get(key.removeprefix('stored '), 0.0):g}"
        return f"{row.delivered_by_consumer.get(key, 0.0):g}"

    def case(i: int, row: E2ERow) -> Column[str]:
        return Column(_title(i, row), lambda key: value(row, key))

    columns: list[Column[str]] = [
        Column("MESSAGES/workload", lambda key: key, numeric=False),
        *(case(i, r) for i, r in enumerate(rows)),
    ]
    return render_table(columns, keys)


def _title(i: int, row: E2ERow) -> str:
    return f"{row.mode} {row.per_call}/call {row.shards}sh #{i + 1}"


def _round_columns() -> list[Column[E2ERow]]:
    """Rounds per replica, facts per round, view writes per second per replica: "-" with
    metrics off (`bench.round_counts`)."""

    def of(value: Callable[[round_counts.PerReplica], float]) -> Callable[[E2ERow], str]:
        return lambda r: "-" if r.rounds is None else f"{value(r.rounds):g}"

    return [
        Column("ROUNDS/replica", of(lambda c: c.rounds_per_replica)),
        Column("EVENTS/round", of(lambda c: c.events_per_round)),
        Column("VIEWS/s/replica", of(lambda c: c.views_per_s)),
    ]


def _cpu_column(process: str) -> Column[E2ERow]:
    return Column(process.upper(), lambda r: f"{r.cpu_ms_per_workload.get(process, 0.0):.2f}")


def render_latency(rows: list[E2ERow]) -> str:
    columns: list[Column[E2ERow]] = [
        Column("MODE", lambda r: r.mode, numeric=False),
        Column("OBSERVE", lambda r: r.observe, numeric=False),
        Column("MANIFEST", lambda r: r.manifest, numeric=False),
        Column("SHARDS", lambda r: str(r.shards)),
        Column("WORKLOADS", lambda r: str(r.workloads)),
        Column("PER CALL", lambda r: str(r.per_call)),
        Column("OFFERED/s", lambda r: "-" if r.offered_per_s is None else f"{r.offered_per_s:g}"),
        Column("ADMITTED", lambda r: str(r.admitted)),
        Column(_bound_header(rows), lambda r: str(r.bound)),
        Column("THROUGHPUT/s", lambda r: f"{r.throughput_per_s:g}"),
        Column("ADMIT p50 ms", lambda r: f"{r.admit_p50_ms:g}"),
        Column("ADMIT p99 ms", lambda r: f"{r.admit_p99_ms:g}"),
        Column("BOUND p50 ms", lambda r: f"{r.bound_p50_ms:g}"),
        Column("BOUND p99 ms", lambda r: f"{r.bound_p99_ms:g}"),
        Column("EVENTS/wl", lambda r: f"{r.events_per_workload:g}"),
        Column("JS STORED/wl", lambda r: f"{r.stored_per_workload.get('total', 0.0):g}"),
        Column("JS DELIVERED/wl", lambda r: f"{r.delivered_per_workload.get('total', 0.0):g}"),
        Column("JS ACKS/s", lambda r: f"{r.jetstream_acks_per_s:g}"),
        Column("JS SHARE", lambda r: f"{100 * r.jetstream_share:.0f} %"),
        Column("REFUSED", lambda r: str(r.refused)),
        _ended_column(),
    ]
    return render_table(columns, rows)


def _bound_header(rows: list[E2ERow]) -> str:
    """BOUND's header, naming the event it and its latencies count, as the rows say."""
    counted = sorted({r.bound_event for r in rows}) or [BOUND_EVENT]
    return f"BOUND ({'|'.join(counted)})"
