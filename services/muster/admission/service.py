"""The admission service's wiring: lease, rebuild, consumer, rounds, visibility, health.

`run_admission(bus, health, config)` is the body `run_service` runs (and tests start as a task):

1. acquire the shard lease `admission.<shard>` (waits while another replica holds it), and keep
   renewing it; on losing it (`LeaseLostError`: a renewal starved past the TTL by a busy host,
   NATS away for a TTL, another replica took it) step down, stop deciding at once, report
   NOT_SERVING with the cause, and campaign again: a new term starts from step 2, so nothing
   decided before the loss is trusted (`_terms`);
2. rebuild `AdmissionState`: replay the newest snapshot (`MUSTER_SNAPSHOTS`, any shard's),
   then `MUSTER_EVENTS` from the snapshot's sequence + 1 (without one, from its first message)
   to its last; then make the term's durable consumer `admission-<shard>-<term>` anew, starting
   just after (`term_durable`);
3. take ownership: write this term's takeover record on each of its partitions (takeover.py:
   what a lapsed holder still sends is refused), adopt this shard's workloads into the engine,
   run one round, publish;
4. consume the durable in stream order, a fetched batch per round (events up to the replay's
   end are skipped), run rounds for due timers, write the visibility bucket and, every
   `--snapshot-seconds`, a snapshot (`snapshot.py`); report SERVING.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Final, NamedTuple

import msgspec

from muster.admission.clusters import follow_clusters
from muster.admission.facts import Term
from muster.admission.handlers import Clock, Reown, Rounds
from muster.admission.handover import StoryFetcher
from muster.admission.homes import HomesOut
from muster.admission.lease import LeaseLostError, ShardLease
from muster.admission.metrics import AdmissionMetrics, ReplicaSeries
from muster.admission.rebuild import SnapshotStore, rebuild, rebuilding
from muster.admission.snapshot import CompactLog, encode_snapshot
from muster.admission.state import AdmissionState
from muster.admission.subjects import consumer_subjects
from muster.admission.takeover import TERM_DURABLE_IDLE_S, take_over, term_durable
from muster.admission.visibility import VisibilityPace, VisibilityRenderer
from muster.admission.visibility_writer import LATE_PAGES_SWEEP_S, VisibilityWriter
from muster.api.model import KueueConfig
from muster.bus import (
    DEFAULT_CLUSTER,
    EVENTS_STREAM,
    Bus,
    BusError,
    ConsumerSettings,
    new_event,
)
from muster.bus.buckets import PARTITIONS_BUCKET, SHARDS_BUCKET, VISIBILITY_BUCKET
from muster.bus.cancel import finishing, raise_if_cancelling
from muster.bus.errors import NotFound, Unavailable
from muster.bus.ordered import Gather, consume_in_order, delete_consumer, make_consumer
from muster.bus.progress import advanced
from muster.bus.pull import ConsumerDeletedError
from muster.bus.pulse import Pulse
from muster.bus.service import Health
from muster.bus.setup import FOLLOWED_TOMBSTONES_KEPT_S, VISIBILITY_TOMBSTONES_KEPT_S
from muster.bus.supervision import supervised
from muster.contracts.v1 import events_pb2 as pb
from muster.core.events import Event
from muster.core.heartbeat_parts import HEARTBEAT_MAX_BYTES
from muster.core.routing import POLICIES, Policy

LAST_SNAPSHOT_S: Final = 5.0  # at shutdown, within the service's grace period (10 s)
VISIBILITY_CPU_SHARE: Final = 20  # views wait at least this many times what computing them took
MAX_ROUND_GAP_S: Final = 0.05  # a round's added latency stays well below a second's tenth
# What the stretch (AdmissionConfig.round_stretch) may add to a round's latency, at most, by
# default: on an idle machine a round lasts a few ms and N of them stay far below it (the p99 of
# submit → admitted at 200/s stays under 50 ms); under load a round lasts 15-25 ms, and 30 ms,
# the bound before, cut the stretch to one or two rounds (docs/benchmarks.md, "pipeline").
ROUND_STRETCH_MOST_S: Final = 0.1
MAX_ROUND_STRETCH_S: Final = 1.0  # what --round-stretch-most-seconds may be set to, at most
TERM_END_S: Final = 1.0  # a term's end waits this long at most to delete its durable
log = logging.getLogger(__name__)
Guard = Callable[[], Awaitable[None]]  # raises LeaseLostError: the replica may not decide


class Tenure(NamedTuple):
    """One term of the shard lease, as each rebuild in it is handed it."""

    term: Term  # its takeover records are this term's (takeover.py)
    guard: Guard  # the lease confirmed before each send
    series: ReplicaSeries | None  # the process's metrics (None: no /metrics)


class AdmissionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What one admission replica is told at start."""

    shard: int = 0
    shards: int = 1
    cluster: str = DEFAULT_CLUSTER  # for events whose workload's cluster is unknown
    lease_ttl_s: float = 5.0
    lease_renew_s: float = 1.0
    # Views are written at most every interval after a quiet spell; under a stream of rounds
    # the rest doubles up to `visibility_busy_s` (visibility.py VisibilityPace).
    visibility_interval_s: float = 0.1
    visibility_busy_s: float = 1.0
    batch: int = 256  # events fetched together, applied in one round
    # A round starts no sooner than `round_gap_s` after the one before unless `round_fill`
    # events wait by then (bus.ordered.Gather); 0: each round as soon as an event is there.
    round_gap_s: float = 0.0
    round_fill: int = 8
    # One of N replicas: a round starts no sooner than N times as long as the one before took
    # after it started (at most `round_stretch_most_s` later), unless `round_fill` events wait,
    # so that its rounds hold about as many events as a lone replica's (bus.ordered.Gather).
    round_stretch: bool = True
    round_stretch_most_s: float = ROUND_STRETCH_MOST_S
    ack_wait_s: float = 30.0  # a dead replica's unacked events come back after this long
    kueue: KueueConfig | None = None  # Kueue's Configuration (--kueue-config)
    cluster_lost_s: float = 10.0  # a worker cluster silent this long is lost (MultiKueue)
    heartbeat_max_bytes: int = HEARTBEAT_MAX_BYTES  # a larger heartbeat is refused
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
        if not 0 <= self.visibility_interval_s <= self.visibility_busy_s:
            raise ValueError("the visibility intervals must be 0 <= quiet <= busy")
        if not 0 <= self.round_gap_s <= MAX_ROUND_GAP_S:
            raise ValueError(
                f"--round-gap-seconds must be in 0..{MAX_ROUND_GAP_S:g}, got {self.round_gap_s:g}"
            )
        if not 0 < self.round_stretch_most_s <= MAX_ROUND_STRETCH_S:
            raise ValueError(
                f"--round-stretch-most-seconds must be in (0, {MAX_ROUND_STRETCH_S:g}], "
                f"got {self.round_stretch_most_s:g}"
            )
        if self.round_fill < 1:
            raise ValueError(f"--round-fill must be >= 1, got {self.round_fill}")
        if not 0 <= self.snapshot_s < math.inf:  # nan was taken for 0, inf wrote none
            raise ValueError(
                f"--snapshot-seconds must be a finite number >= 0 (0: none), "
                f"got {self.snapshot_s:g}"
            )
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
        """The shard's name: its dead letters' subject, its snapshot's object; its consumer's
        before terms named theirs (`term_durable`)."""
        return f"admission-{self.shard}"

    @property
    def gather(self) -> Gather | None:
        stretch = self.shards if self.round_stretch and self.shards > 1 else 0
        if not stretch and self.round_gap_s <= 0:
            return None  # a lone replica: each round as soon as an event is there
        return Gather(
            self.round_gap_s,
            self.round_fill,
            stretch=stretch,
            stretch_most_s=self.round_stretch_most_s if stretch else 0.0,
        )

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
    """Own shard `config.shard` and decide for it until cancelled.

    When the partitions it decides change under it (Reown), it rebuilds and goes on; when it
    loses its lease, it steps down and campaigns again (`_terms`).
    """
    kv = await bus.kv(SHARDS_BUCKET, ttl_s=config.lease_ttl_s)
    owner = f"{socket.gethostname()}/{os.getpid()}/{id(health):x}"
    lease = ShardLease(
        kv,
        shard=config.shard,
        owner=owner,
        ttl_s=config.lease_ttl_s,
        renew_s=config.lease_renew_s,
        denied=bus.denied,
    )
    await _terms(bus, health, config, lease, clock=clock)


async def _terms(
    bus: Bus, health: Health, config: AdmissionConfig, lease: ShardLease, *, clock: Clock
) -> None:
    """Hold the lease and decide, one term after another, until cancelled.

    A lost lease ends the term, not the service: a host too busy to renew in time (a long
    round, a profiler, a CPU hog) would otherwise leave its shard undecided until someone
    restarts it. Stepping down cancels the deciding loops before anything else runs (what a
    round has in flight is fenced as it always was), and the next term waits for the lease,
    then rebuilds from the stream before deciding: the successor's decisions, if one took
    over meanwhile, are read before this replica decides anything again.
    """
    terms = 0
    # Registered once: every term and rebuild reports to the same series.
    series = (
        ReplicaSeries(bus.metrics.registry, shard=config.shard) if bus.metrics is not None else None
    )
    while True:
        await lease.acquire()
        terms += 1
        try:
            await _term(bus, health, config, lease, clock=clock, series=series)
        except LeaseLostError as exc:
            if series is not None:
                series.stepped_down(exc.cause)
            health.waiting(f"{exc}; campaigning again")
            log.warning(
                "stepping down from shard %d after term %d: %s; campaigning again (a rebuild "
                "before deciding)",
                config.shard,
                terms,
                exc,
            )
        finally:
            await asyncio.shield(lease.release())  # nothing when lost: it is not ours


async def _term(
    bus: Bus,
    health: Health,
    config: AdmissionConfig,
    lease: ShardLease,
    *,
    clock: Clock,
    series: ReplicaSeries | None,
) -> None:
    """Renew the lease and decide until one of them ends: a lost lease (LeaseLostError,
    raised), a failure (raised), or a cancellation. Plain tasks, not a TaskGroup (as `_live`
    says why): a term follows the one before in the same task."""
    tenure = Tenure(Term(config.shard, lease.term, lease.owner), lease.confirm, series)
    tasks = [
        supervised(
            lease.hold(bus.pulses.pulse("admission-lease")),
            name="admission-lease",
            expected=(LeaseLostError,),
        ),
        supervised(
            _decide(bus, health, config, clock=clock, tenure=tenure),
            name="admission",
            expected=(LeaseLostError,),
        ),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Its durable is nobody else's (takeover.py `term_durable`): not left to idle away.
        durable = term_durable(config.durable, tenure.term)
        with contextlib.suppress(BusError, TimeoutError):
            async with asyncio.timeout(TERM_END_S):
                await asyncio.shield(delete_consumer(bus, EVENTS_STREAM, durable))


async def _decide(
    bus: Bus, health: Health, config: AdmissionConfig, *, clock: Clock, tenure: Tenure
) -> None:
    """Rebuild, then decide, until cancelled; again from a rebuild after each Reown."""
    while True:
        try:
            await _live(bus, health, config, clock=clock, tenure=tenure)
        except (Reown, ConsumerDeletedError) as exc:
            # Its durable deleted under it: by an operator, or by the server after it sat
            # idle (takeover.py TERM_DURABLE_IDLE_S); a rebuild makes it anew.
            log.warning("rebuilding: %s", exc)


async def _live(
    bus: Bus,
    health: Health,
    config: AdmissionConfig,
    *,
    clock: Clock,
    tenure: Tenure,
) -> None:
    """Rebuild, then decide until cancelled or a Reown (raised).

    Its loops are plain tasks, not a TaskGroup: in Python 3.11 a TaskGroup whose task failed
    leaves its parent task cancelling, which would stop the next life at once.
    """
    service = AdmissionService(bus, config, clock=clock, tenure=tenure)
    with rebuilding():
        await service.start()
    loops = {
        "admission-timers": service.rounds.run_timers(bus.pulses.pulse("admission-timers")),
        "admission-visibility": service.write_visibility(bus.pulses.pulse("admission-visibility")),
        "admission-clusters": follow_clusters(
            bus,
            service.state.dispatch,
            service.rounds.apply_batch,
            clock=clock,
            max_bytes=config.heartbeat_max_bytes,
        ),
        "admission-events": consume_in_order(
            bus,
            service.consumer,
            service.rounds.apply_batch,
            config.consumer_settings(),
            gather=config.gather,
            name=config.durable,
        ),
    }
    if config.snapshot_s > 0:
        loops["admission-snapshots"] = service.write_snapshots(
            bus.pulses.pulse("admission-snapshots")
        )
    # A Reown, a lapsed lease or a deleted durable ends this life, awaited below; any other
    # failure is the service's.
    ending = (Reown, LeaseLostError, ConsumerDeletedError)
    tasks = [supervised(loop, name=name, expected=ending) for name, loop in loops.items()]
    try:
        health.ready()
        log.info(
            "serving shard %d of %d, partitions %s (rebuilt to sequence %d)",
            config.shard,
            config.shards,
            ",".join(map(str, sorted(service.state.sharding.owned))) or "none",
            service.state.last_sequence,
        )
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # a Reown, or a failure that ends the service
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class AdmissionService:
    """The replica's state and the loops around it; `start` is the rebuild."""

    def __init__(
        self,
        bus: Bus,
        config: AdmissionConfig,
        *,
        clock: Clock,
        tenure: Tenure | None = None,
    ) -> None:
        """`tenure`: the term of the shard lease it decides in; None: no lease (tests)."""
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
        self.state.term = tenure.term if tenure is not None else None
        self.guard = tenure.guard if tenure is not None else None
        self.consumer = term_durable(config.durable, self.state.term)  # its durable consumer
        # The events the state depends on, kept as they are applied: snapshots are taken from
        # it, and a workload's story is forwarded from it when its home moves (homes.py).
        self.history = CompactLog(self.state.ledger)
        self.snapshots = SnapshotStore(bus)
        self.snapshot_sequence = 0  # of the last snapshot read or written
        self.stream_created = ""  # when MUSTER_EVENTS was created: set by `start`
        self._dirty = asyncio.Event()
        self._changed_rounds = 0  # rounds that changed the views since they were last computed
        # With /metrics: Kueue's series for this shard's trees, and its own rounds.
        series = tenure.series if tenure is not None else None
        if series is None and bus.metrics is not None:
            series = ReplicaSeries(bus.metrics.registry, shard=config.shard)
        self.metrics = AdmissionMetrics(series, self.state) if series is not None else None
        max_event_bytes = bus.config.max_event_bytes
        self.rounds = Rounds(
            self.state,
            bus.publisher,  # not the Bus's wrappers: a frame less to resume per PubAck
            clock=clock,
            on_round=self._changed,
            history=self.history,
            metrics=self.metrics,
            fetch=StoryFetcher(
                bus, self.state, self.snapshots, self._stream, max_event_bytes=max_event_bytes
            ),
            max_event_bytes=max_event_bytes,
            dead_letters=config.durable,
            guard=self.guard,
        )

    def _changed(self) -> None:
        self._changed_rounds += 1
        self._dirty.set()

    def _stream(self) -> str:
        return self.stream_created

    async def start(self) -> None:
        """Catch up before owning: rebuild, make the durable after it, adopt, decide once."""
        stream = await self.bus.stream_state(EVENTS_STREAM)
        # Sequences start over in a stream deleted and made again: snapshots name theirs.
        self.stream_created = stream.created
        end = stream.last
        started = time.perf_counter()
        rebuilt = await rebuild(
            self.bus,
            self.state,
            history=self.history,
            snapshots=self.snapshots if self.config.snapshot_s > 0 else None,
            stream_created=self.stream_created,
            end=end,
            max_event_bytes=self.bus.config.max_event_bytes,
        )
        self.rounds.unread = rebuilt.unread  # what its consumer leaves out, its snapshots say
        self.snapshot_sequence = rebuilt.snapshot_sequence
        if rebuilt.snapshot_sequence:
            log.info(
                "snapshot at sequence %d loaded: %d events",
                rebuilt.snapshot_sequence,
                rebuilt.snapshot_events,
            )
            if self.metrics is not None:
                self.metrics.own.snapshot_taken()
        first = stream.first
        if first > rebuilt.snapshot_sequence + 1 and end > rebuilt.snapshot_sequence:
            log.warning(
                "events %d..%d are no longer in %s (retention): the rebuild misses what they "
                "said (workloads submitted, finished or deleted then)",
                rebuilt.snapshot_sequence + 1,
                first - 1,
                EVENTS_STREAM,
            )
        idle_s = None
        if self.guard is not None:
            # The consumer delivers these records too (they fence).
            await take_over(self.bus, self.state, guard=self.guard)
            # The shard's durable of before terms named theirs (docs/events.md), if left.
            await delete_consumer(self.bus, EVENTS_STREAM, self.config.durable)
            idle_s = TERM_DURABLE_IDLE_S
        await make_consumer(
            self.bus,
            self.consumer,
            consumer_subjects(self.state.sharding.owned, unread=self.rounds.unread),
            self.config.consumer_settings(),
            start_sequence=end + 1,
            inactive_s=idle_s,
        )
        events: list[Event] = []
        for step in self.state.taking_ownership(now_s=self.clock()):
            events += step
            await asyncio.sleep(0)  # the lease's renewal runs between steps
        await self.rounds.catch_up(events, replay_end=end)
        log.info(
            "rebuilt from %d snapshot events and %d stream events in %.3fs: "
            "%d live workloads read, %d decided here",
            rebuilt.snapshot_events,
            rebuilt.stream_events,
            time.perf_counter() - started,
            len(self.state.ledger),
            len(self.state.adopted),
        )

    async def write_snapshots(self, pulse: Pulse) -> None:
        """Every `snapshot_s`, store a snapshot if anything was applied since the last one;
        one that fails is tried again at the next interval. Stopped, store a last one: the
        next replica to start (a rolling restart) then replays almost nothing. `pulse` is
        due at each interval's end: a write that hangs past it is a stall (bus/pulse.py)."""
        try:
            while True:
                raise_if_cancelling()
                pulse.beat(self.config.snapshot_s)
                await asyncio.sleep(self.config.snapshot_s)
                with pulse.handling():  # each step of the write advances it
                    await self._caught_up()
                if self.state.last_sequence <= self.snapshot_sequence:
                    continue
                try:
                    # Let a write finish at shutdown: one cut short leaves its chunks behind.
                    with pulse.handling():
                        await finishing(self.write_snapshot())
                except (Unavailable, TimeoutError) as exc:
                    log.warning(
                        "snapshot not written, again in %gs: %r", self.config.snapshot_s, exc
                    )
        except asyncio.CancelledError:
            await self._last_snapshot()
            raise

    async def _caught_up(self) -> None:
        """Count as applied every event stored before the consumer was seen drained.

        The consumer reads none of this replica's own decisions, so the last applied sequence
        would stay below them, and a snapshot would not say it holds them.
        """
        try:
            end = (await self.bus.stream_state(EVENTS_STREAM)).last
            async with self.rounds.lock:  # no batch applied meanwhile, none half-way
                if await self.bus.drained(self.consumer, stream=EVENTS_STREAM):
                    self.state.last_sequence = max(self.state.last_sequence, end)
        except (Unavailable, NotFound, TimeoutError) as exc:
            log.debug("consumer not read, the last sequence stays: %r", exc)

    async def _last_snapshot(self) -> None:
        await self._caught_up()
        if self.state.last_sequence <= self.snapshot_sequence:
            return
        try:
            async with asyncio.timeout(LAST_SNAPSHOT_S):
                await self.write_snapshot()
        except (TimeoutError, BusError) as exc:
            log.warning("no snapshot at shutdown: %r", exc)

    async def write_snapshot(self) -> None:
        """Store what the state depends on now as this shard's snapshot."""
        assert self.history is not None, "snapshots are off"
        started = time.perf_counter()
        async with self.rounds.lock:  # between rounds: the log and the last sequence agree
            if self.state.repartitioned:  # it names partitions whose events it may not hold
                return
            snapshot = self.history.snapshot(
                sequence=self.state.last_sequence,
                stream=self.stream_created,
                partitions=tuple(sorted(self.state.sharding.owned)),
            )
            snapshot = msgspec.structs.replace(
                snapshot,
                unread=tuple(sorted(self.rounds.unread)),
                usage=self.state.ended_usage(),
            )
        advanced()
        data = await asyncio.to_thread(encode_snapshot, snapshot)
        advanced()
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

    async def write_visibility(self, pulse: Pulse) -> None:
        """Write changed queue statuses and pending lists; publish queue.status on change;
        write each LocalQueue's partition (homes.py) into `MUSTER_PARTITIONS`. `pulse` is due
        when the wait for a change ends (LATE_PAGES_SWEEP_S at most) and after each rest: a
        write that hangs, no key written or deleted for `--stall-seconds`, is a stall
        (bus/pulse.py).

        Paced by `VisibilityPace`: within `visibility_interval_s` of a change after a quiet
        spell, within `visibility_busy_s` under a stream of rounds, and less often when
        computing the views takes long: they are not on the decision path, so they get at
        most 1/VISIBILITY_CPU_SHARE of the time. Only the queues the engine reports changed
        are rendered again (`VisibilityRenderer`), and only they are compared with what was
        written. Kueue's gauges (metrics on) are computed with them, in that share.
        """
        kv = await self.bus.kv(VISIBILITY_BUCKET)
        renderer = VisibilityRenderer()
        # Fenced on each ClusterQueue's epoch; its tombstones expire (no reader follows them).
        writer = VisibilityWriter(kv, renderer, tombstones_kept_s=VISIBILITY_TOMBSTONES_KEPT_S)
        # A deleted LocalQueue's partition: its tombstone expires (bus/setup.py says why).
        queues = VisibilityWriter(
            await self.bus.kv(PARTITIONS_BUCKET), tombstones_kept_s=FOLLOWED_TOMBSTONES_KEPT_S
        )
        pace = VisibilityPace(
            quiet_s=self.config.visibility_interval_s,
            busy_s=self.config.visibility_busy_s,
            cpu_share=VISIBILITY_CPU_SHARE,
        )
        homes_out = HomesOut()
        swept_at = time.monotonic()
        while True:
            raise_if_cancelling()
            pulse.beat(LATE_PAGES_SWEEP_S)
            waited = not self._dirty.is_set()  # no round changed the views while resting
            with contextlib.suppress(TimeoutError):  # a quiet replica sweeps late pages too
                async with asyncio.timeout(LATE_PAGES_SWEEP_S):  # no task, as wait_for makes
                    await self._dirty.wait()
            pulse.beat(0.0)  # the write is due now: it moves with each key, or it is stalled
            self._dirty.clear()
            rounds, self._changed_rounds = self._changed_rounds, 0
            started = time.perf_counter()
            async with self.rounds.lock:
                values, changed = renderer.render(
                    self.state.engine,
                    self.state.sharding,
                    sequence=self.state.last_sequence,
                    moved_at=self.state.fences,
                    trees=self.state.trees,
                )
                homes_version = self.state.homes.version
                homes = homes_out.owed(self.state.homes)
                if self.metrics is not None:
                    self.metrics.refresh_gauges()
            spent_s = time.perf_counter() - started
            try:
                with pulse.handling():  # each key written or deleted advances it
                    put = await writer.write(values, changed)
                    if self.metrics is not None:
                        self.metrics.own.views_written()
                    await writer.sweep_legacy(kv, values)  # once: pages of before an upgrade
                    await self._publish_statuses(put, values)
                    if homes is not None:
                        await queues.write(homes)
                        homes_out.written(homes_version)
                    if time.monotonic() - swept_at >= LATE_PAGES_SWEEP_S:
                        swept_at = time.monotonic()
                        await writer.sweep_late_pages()
            except (TimeoutError, BusError) as exc:
                log.warning("visibility not written, retrying: %r", exc)
                self._dirty.set()
            rest_s = pace.rest_s(rounds=rounds, waited=waited, spent_s=spent_s)
            pulse.beat(rest_s)
            await asyncio.sleep(rest_s)

    async def _publish_statuses(self, keys: list[str], values: dict[str, bytes]) -> None:
        """One queue.status per ClusterQueue whose status changed, published side by side in
        one flight (no task each); the first that failed is raised, as the write's failure."""
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
        if not envs:
            return
        results = await self.bus.publish_together(envs, [None] * len(envs))
        failed = next((r for r in results if isinstance(r, BusError)), None)
        if failed is not None:
            raise failed
