"""The admission service's wiring: lease, rebuild, consumer, rounds, visibility, health.

`run_admission(bus, health, config)` is the body `run_service` runs (and tests start as a task):

1. acquire the shard lease `admission.<shard>` (waits while another replica holds it), and keep
   renewing it; losing it raises `LeaseLostError`, which stops the service with exit status 1;
2. create the durable consumer `admission-<shard>` if missing (starting at the stream's end),
   then rebuild `AdmissionState`: replay the newest snapshot (`MUSTER_SNAPSHOTS`, any shard's),
   then `MUSTER_EVENTS` from the snapshot's sequence + 1 (without one, from its first message)
   to its last;
3. take ownership: adopt this shard's workloads into the engine, run one round, publish;
4. consume the durable in stream order, a fetched batch per round (events up to the replay's
   end are skipped), run rounds for due timers, write the visibility bucket and, every
   `--snapshot-seconds`, a snapshot (`snapshot.py`); report SERVING.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Final

import msgspec
import nats.errors

from muster.admission.clusters import follow_clusters
from muster.admission.consumer import consume_in_order, ensure_consumer
from muster.admission.handlers import Clock, Rounds
from muster.admission.lease import SHARDS_BUCKET, ShardLease
from muster.admission.metrics import AdmissionMetrics
from muster.admission.rebuild import SnapshotStore, replay_event, restore
from muster.admission.snapshot import CompactLog, encode_snapshot
from muster.admission.state import AdmissionState
from muster.admission.translate import RECORDED, WORKLOAD_FACTS
from muster.admission.visibility import VisibilityWriter, visibility_values
from muster.api.model import KueueConfig
from muster.bus import (
    DEFAULT_CLUSTER,
    EVENTS_STREAM,
    Bus,
    BusError,
    ConsumerSettings,
    config_subject,
    new_event,
    workload_subject,
)
from muster.bus.cancel import finishing, raise_if_cancelling
from muster.bus.service import Health
from muster.contracts.v1 import events_pb2 as pb
from muster.core.routing import POLICIES, Policy

VISIBILITY_BUCKET: Final = "MUSTER_VISIBILITY"
LAST_SNAPSHOT_S: Final = 5.0  # at shutdown, within the service's grace period (10 s)
VISIBILITY_CPU_SHARE: Final = 20  # views wait at least this many times what computing them took
# Only the events `fact_of` reads, filtered by the server: the others (bound, running,
# gang_permitted, ...) are most of the stream, and each would cost a delivery and an ack.
SUBJECTS: Final = (
    *(workload_subject("*", field) for field in (*WORKLOAD_FACTS, *RECORDED)),
    config_subject("*", ">"),
)

log = logging.getLogger(__name__)


class AdmissionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What one admission replica is told at start."""

    shard: int = 0
    shards: int = 1
    cluster: str = DEFAULT_CLUSTER  # for events whose workload's cluster is unknown
    lease_ttl_s: float = 5.0
    lease_renew_s: float = 1.0
    visibility_interval_s: float = 0.1  # at most one write per key per interval
    batch: int = 256  # events fetched together, applied in one round
    ack_wait_s: float = 30.0  # a dead replica's unacked events come back after this long
    kueue: KueueConfig | None = None  # Kueue's Configuration (--kueue-config)
    cluster_lost_s: float = 10.0  # a worker cluster silent this long is lost (MultiKueue)
    # Where a ClusterQueue names no muster.dev/routing-policy (docs/routing.md).
    routing_policy: Policy = Policy.STATIC
    snapshot_s: float = 300.0  # how often a snapshot is stored; 0: never (and none is read)

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"--shards must be >= 1, got {self.shards}")
        if not 0 <= self.shard < self.shards:
            raise ValueError(f"--shard must be in 0..{self.shards - 1}, got {self.shard}")
        if not 0 < self.lease_renew_s < self.lease_ttl_s:
            raise ValueError("the lease renewal interval must be shorter than its TTL")
        if self.visibility_interval_s < 0:
            raise ValueError("the visibility interval must be >= 0")
        if self.snapshot_s < 0:
            raise ValueError(f"--snapshot-seconds must be >= 0, got {self.snapshot_s:g}")
        if not self.cluster_lost_s > 0:
            raise ValueError(f"--cluster-lost-seconds must be > 0, got {self.cluster_lost_s:g}")
        if self.routing_policy not in POLICIES:
            raise ValueError(
                f"--routing-policy must be one of {', '.join(POLICIES)}, "
                f"got {self.routing_policy!r}"
            )

    @property
    def source(self) -> str:
        return f"admission/{self.shard}"

    @property
    def durable(self) -> str:
        return f"admission-{self.shard}"

    def consumer_settings(self) -> ConsumerSettings:
        return ConsumerSettings(
            stream=EVENTS_STREAM,
            batch=self.batch,
            max_ack_pending=max(1024, 4 * self.batch),
            ack_wait_s=self.ack_wait_s,
            deliver_new=True,  # a new durable starts after the replay, which it follows
        )


async def run_admission(
    bus: Bus, health: Health, config: AdmissionConfig, *, clock: Clock = time.time
) -> None:
    """Own shard `config.shard` and decide for it until cancelled (or the lease is lost)."""
    kv = await bus.kv(SHARDS_BUCKET, ttl_s=config.lease_ttl_s)
    owner = f"{socket.gethostname()}/{os.getpid()}/{id(health):x}"
    lease = ShardLease(
        kv,
        shard=config.shard,
        owner=owner,
        ttl_s=config.lease_ttl_s,
        renew_s=config.lease_renew_s,
    )
    await lease.acquire()
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(lease.hold(), name="admission-lease")
            service = AdmissionService(bus, config, clock=clock)
            await service.start()
            tg.create_task(service.rounds.run_timers(), name="admission-timers")
            tg.create_task(service.write_visibility(), name="admission-visibility")
            if config.snapshot_s > 0:
                tg.create_task(service.write_snapshots(), name="admission-snapshots")
            tg.create_task(
                follow_clusters(
                    bus, service.state.dispatch, service.rounds.apply_batch, clock=clock
                ),
                name="admission-clusters",
            )
            tg.create_task(
                consume_in_order(
                    bus,
                    config.durable,
                    SUBJECTS,
                    service.rounds.apply_batch,
                    config.consumer_settings(),
                ),
                name="admission-consumer",
            )
            health.ready()
            log.info(
                "serving shard %d of %d (rebuilt to sequence %d)",
                config.shard,
                config.shards,
                service.state.last_sequence,
            )
    finally:
        await asyncio.shield(lease.release())


class AdmissionService:
    """The replica's state and the loops around it; `start` is the rebuild."""

    def __init__(self, bus: Bus, config: AdmissionConfig, *, clock: Clock) -> None:
        self.bus = bus
        self.config = config
        self.clock = clock
        self.state = AdmissionState(
            shard=config.shard,
            shards=config.shards,
            source=config.source,
            default_cluster=config.cluster,
            kueue=config.kueue,
            cluster_lost_s=config.cluster_lost_s,
            routing_policy=Policy(config.routing_policy),
        )
        # Snapshots on: the events the state depends on, kept as they are applied.
        self.history = CompactLog(self.state.ledger) if config.snapshot_s > 0 else None
        self.snapshots = SnapshotStore(bus.js, replicas=bus.config.stream_replicas)
        self.snapshot_sequence = 0  # of the last snapshot read or written
        self.stream_created = ""  # when MUSTER_EVENTS was created: set by `start`
        self._dirty = asyncio.Event()
        # With /metrics: Kueue's series for this shard's trees, and its own rounds.
        self.metrics = (
            AdmissionMetrics(bus.metrics.registry, self.state) if bus.metrics is not None else None
        )
        self.rounds = Rounds(
            self.state,
            bus,
            clock=clock,
            on_round=self._dirty.set,
            history=self.history,
            metrics=self.metrics,
        )

    async def start(self) -> None:
        """Catch up before owning: make the durable, rebuild, adopt, decide once."""
        await ensure_consumer(
            self.bus, self.config.durable, SUBJECTS, self.config.consumer_settings()
        )
        stream = await self.bus.js.stream_info(EVENTS_STREAM)
        # Sequences start over in a stream deleted and made again: snapshots name theirs.
        self.stream_created = stream.created.isoformat() if stream.created else ""
        end = int(stream.state.last_seq)
        started = time.perf_counter()
        restored = await self._restore(end=end)
        start = self.state.last_sequence + 1
        first = int(stream.state.first_seq)
        if first > start and end >= start:
            log.warning(
                "events %d..%d are no longer in %s (retention): the rebuild misses what they "
                "said (workloads submitted, finished or deleted then)",
                start,
                first - 1,
                EVENTS_STREAM,
            )
        replayed = 0
        async for env in self.bus.replay(list(SUBJECTS), from_sequence=start, until_sequence=end):
            replay_event(self.state, env, history=self.history)
            replayed += 1
        self.state.last_sequence = max(self.state.last_sequence, end)
        events = self.state.take_ownership(now_s=self.clock())
        await self.rounds.catch_up(events, replay_end=end)
        log.info(
            "rebuilt from %d snapshot events and %d stream events in %.3fs: "
            "%d live workloads, %d in this shard",
            restored,
            replayed,
            time.perf_counter() - started,
            len(self.state.ledger),
            len(self.state.adopted),
        )

    async def _restore(self, *, end: int) -> int:
        """Replay the newest snapshot into the state (snapshots on); how many events it held."""
        if self.history is None:
            return 0
        started = time.perf_counter()
        snapshot = await self.snapshots.newest(stream=self.stream_created, at_most=end)
        if snapshot is None:
            return 0
        restore(
            self.state,
            snapshot,
            history=self.history,
            max_event_bytes=self.bus.config.max_event_bytes,
        )
        self.snapshot_sequence = snapshot.sequence
        if self.metrics is not None:
            self.metrics.own.snapshot_taken()
        log.info(
            "snapshot at sequence %d loaded: %d events, %d bytes, in %.3fs",
            snapshot.sequence,
            len(snapshot.events),
            snapshot.size,
            time.perf_counter() - started,
        )
        return len(snapshot.events)

    async def write_snapshots(self) -> None:
        """Every `snapshot_s`, store a snapshot if anything was applied since the last one;
        one that fails is tried again at the next interval. Stopped, store a last one: the
        next replica to start (a rolling restart) then replays almost nothing."""
        try:
            while True:
                raise_if_cancelling()
                await asyncio.sleep(self.config.snapshot_s)
                if self.state.last_sequence <= self.snapshot_sequence:
                    continue
                try:
                    # Let a write finish at shutdown: one cut short leaves its chunks behind.
                    await finishing(self.write_snapshot())
                except (nats.errors.Error, TimeoutError) as exc:
                    log.warning(
                        "snapshot not written, again in %gs: %r", self.config.snapshot_s, exc
                    )
        except asyncio.CancelledError:
            await self._last_snapshot()
            raise

    async def _last_snapshot(self) -> None:
        if self.state.last_sequence <= self.snapshot_sequence:
            return
        try:
            async with asyncio.timeout(LAST_SNAPSHOT_S):
                await self.write_snapshot()
        except (nats.errors.Error, TimeoutError, BusError) as exc:
            log.warning("no snapshot at shutdown: %r", exc)

    async def write_snapshot(self) -> None:
        """Store what the state depends on now as this shard's snapshot."""
        assert self.history is not None, "snapshots are off"
        started = time.perf_counter()
        async with self.rounds.lock:  # between rounds: the log and the last sequence agree
            snapshot = self.history.snapshot(
                sequence=self.state.last_sequence, stream=self.stream_created
            )
        data = await asyncio.to_thread(encode_snapshot, snapshot)
        await self.snapshots.put(self.config.durable, snapshot, data)
        self.snapshot_sequence = snapshot.sequence
        if self.metrics is not None:
            self.metrics.own.snapshot_taken()
        log.info(
            "snapshot at sequence %d written: %d events, %d bytes (%d stored), in %.3fs",
            snapshot.sequence,
            len(snapshot.events),
            snapshot.size,
            len(data),
            time.perf_counter() - started,
        )

    async def write_visibility(self) -> None:
        """Write changed queue statuses and pending lists; publish queue.status on change.

        At most once per `visibility_interval_s`, and less often when computing the views
        takes long (many workloads): they are read from the engine's records, and are not on
        the decision path, so they get at most 1/VISIBILITY_CPU_SHARE of the time. Kueue's
        gauges (metrics on) are computed with them, in that share.
        """
        kv = await self.bus.kv(VISIBILITY_BUCKET)
        writer = VisibilityWriter(kv)
        while True:
            raise_if_cancelling()
            await self._dirty.wait()
            self._dirty.clear()
            started = time.perf_counter()
            async with self.rounds.lock:
                values = visibility_values(self.state.engine, self.state.sharding)
                if self.metrics is not None:
                    self.metrics.refresh_gauges()
            spent_s = time.perf_counter() - started
            try:
                put = await writer.write(values)
                await self._publish_statuses(put, values)
            except (nats.errors.Error, TimeoutError, BusError) as exc:
                log.warning("visibility not written, retrying: %r", exc)
                self._dirty.set()
            await asyncio.sleep(
                max(self.config.visibility_interval_s, spent_s * VISIBILITY_CPU_SHARE)
            )

    async def _publish_statuses(self, keys: list[str], values: dict[str, bytes]) -> None:
        """One queue.status per ClusterQueue whose status changed, published side by side."""
        envs = []
        for key in keys:
            if not key.startswith("cq."):
                continue
            status = pb.ClusterQueueStatus.FromString(values[key])
            cluster = self.state.cluster_queue_clusters.get(status.name) or self.config.cluster
            envs.append(
                new_event(
                    "queue_status",
                    pb.QueueStatusChanged(cluster_queue=status),
                    cluster=cluster,
                    source=self.config.source,
                )
            )
        await asyncio.gather(*(self.bus.publish(env) for env in envs))
