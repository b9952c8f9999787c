"""The admission service's wiring: lease, rebuild, consumer, rounds, visibility, health.

`run_admission(bus, health, config)` is the body `run_service` runs (and tests start as a task):

1. acquire the shard lease `admission.<shard>` (waits while another replica holds it), and keep
   renewing it; losing it raises `LeaseLostError`, which stops the service with exit status 1;
2. create the durable consumer `admission-<shard>` if missing (starting at the stream's end),
   then replay `MUSTER_EVENTS` from its first message to its last into `AdmissionState`;
3. take ownership: adopt this shard's workloads into the engine, run one round, publish;
4. consume the durable in stream order, a fetched batch per round (events up to the replay's
   end are skipped), run rounds for due timers, write the visibility bucket; report SERVING.
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
from muster.admission.state import AdmissionState
from muster.admission.translate import RECORDED, WORKLOAD_FACTS, fact_of
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
from muster.bus.cancel import raise_if_cancelling
from muster.bus.service import Health
from muster.contracts.v1 import events_pb2 as pb
from muster.core.routing import POLICIES, Policy

VISIBILITY_BUCKET: Final = "MUSTER_VISIBILITY"
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

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"--shards must be >= 1, got {self.shards}")
        if not 0 <= self.shard < self.shards:
            raise ValueError(f"--shard must be in 0..{self.shards - 1}, got {self.shard}")
        if not 0 < self.lease_renew_s < self.lease_ttl_s:
            raise ValueError("the lease renewal interval must be shorter than its TTL")
        if self.visibility_interval_s < 0:
            raise ValueError("the visibility interval must be >= 0")
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
        self._dirty = asyncio.Event()
        self.rounds = Rounds(self.state, bus, clock=clock, on_round=self._dirty.set)

    async def start(self) -> None:
        """Catch up before owning: make the durable, replay history, adopt, decide once."""
        await ensure_consumer(
            self.bus, self.config.durable, SUBJECTS, self.config.consumer_settings()
        )
        end = await self.bus.last_sequence(EVENTS_STREAM)
        replayed = 0
        started = time.perf_counter()
        async for env in self.bus.replay(list(SUBJECTS), until_sequence=end):
            try:
                fact = fact_of(env)
            except ValueError as exc:
                log.warning("rebuild skips %s#%d: %s", env.type, env.sequence, exc)
                fact = None
            self.state.replay(fact, sequence=env.sequence, cluster=env.cluster)
            replayed += 1
        self.state.last_sequence = max(self.state.last_sequence, end)
        events = self.state.take_ownership(now_s=self.clock())
        await self.rounds.catch_up(events, replay_end=end)
        log.info(
            "rebuilt from %d events in %.3fs: %d live workloads, %d in this shard",
            replayed,
            time.perf_counter() - started,
            len(self.state.ledger),
            len(self.state.adopted),
        )

    async def write_visibility(self) -> None:
        """Write changed queue statuses and pending lists; publish queue.status on change.

        At most once per `visibility_interval_s`, and less often when computing the views
        takes long (many workloads): they are read from the engine's records, and are not on
        the decision path, so they get at most 1/VISIBILITY_CPU_SHARE of the time.
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
