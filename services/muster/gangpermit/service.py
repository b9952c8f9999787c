"""The gangpermit service of one cluster: places gangs whole, as the cluster and events change.

At start it replays the cluster's events (its own past decisions included, see
`muster.gangpermit.state`), then reads the whole cluster through a watch of its backend, and
only then decides. A pass (`translate.decide`) runs when a cluster object or a followed event may
let a gang go, and at the scheduler's next deadline; its events are published together, each
retried with the same id until JetStream has it. With spans recorded, a pass is the span
`gangpermit.pass` and each decision a span `gangpermit.<decision>` in its gang's trace (a Kueue
workload's: its admission's); with metrics on, `muster_placement_pass_duration_seconds` and
`muster_gangs_waiting`. Every few seconds, and soon after a pass, it
puts the cluster's free room in `MUSTER_CLUSTERS` for admission's MultiKueue dispatch
(docs/multicluster.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import msgspec

from muster.api.wellknown import SCHEDULER_NAME
from muster.bus.buckets import CLUSTERS_BUCKET
from muster.bus.cancel import raise_if_cancelling
from muster.bus.connection import Bus
from muster.bus.errors import BusError, Reject, Unavailable
from muster.bus.poison import Quarantine
from muster.bus.progress import advanced
from muster.bus.setup import FOLLOWED_TOMBSTONES_KEPT_S
from muster.bus.subjects import binder_durable, config_subject, workload_filters
from muster.bus.supervision import SupervisedGroup
from muster.bus.tracing import start_span, trace_decisions
from muster.cluster.backend import ClusterBackend
from muster.cluster.errors import ClusterError
from muster.contracts.v1 import events_pb2
from muster.core.dispatch import ClusterCapacity
from muster.core.heartbeat_parts import encode_room
from muster.core.placement.model import Scoring
from muster.core.placement.scheduler import DEFAULT_TIMEOUT_S
from muster.core.submissions import ENDED_KEPT_S, check_ended_kept
from muster.gangpermit.cache import ClusterCache, Warn
from muster.gangpermit.evictions import RESEND_FIRST_S
from muster.gangpermit.room_writer import RoomWriter
from muster.gangpermit.state import GangPermitState
from muster.gangpermit.translate import decide
from muster.metrics.services import PlacementSeries

log = logging.getLogger(__name__)

# Once running, gang-permit follows what others publish about its gangs; its own decisions
# and the binder's `bound` (the cache sees the binds) matter only when it restores its state.
FOLLOWED_EVENTS = (
    "submitted",
    "admitted",
    "finished",
    "eviction_completed",
    "deleted",
    "gang_rejected",
)
RESTORED_EVENTS = (
    *FOLLOWED_EVENTS,
    "bound",
    "gang_permitted",
    "gang_waiting",
    "placement_preempted",
)
# A workload's spec and end are followed on every cluster: MultiKueue may dispatch a workload
# submitted in another cluster here (docs/multicluster.md).
SPEC_EVENTS = frozenset({"submitted", "finished", "deleted"})
HEARTBEAT_MIN_S = 0.1  # at most ten heartbeats a second, however busy the passes
# The least --heartbeat-seconds: each beat is a write to MUSTER_CLUSTERS that every admission
# replica reads, so 1e-9 wrote as fast as the loop could turn.
HEARTBEAT_FLOOR_S = 0.01
# A heartbeat costs encoding the room (a few ms at 5 000 nodes; a large room's changed parts
# only, `muster bench decode`): the rest after one is at least this many times what computing
# it took, so heartbeats take at most 1/20 of the loop.
HEARTBEAT_CPU_SHARE = 20.0
# A pass waits this long after the first change that woke it, so that changes arriving
# together (a gang's pods, a burst of pods) are decided in one pass.
BATCH_WINDOW_S = 0.005
_MIN_WAIT_S = 0.01
_PUBLISH_RETRY_S = (0.1, 0.2, 0.5, 1.0, 2.0)  # then every 2 s, until published


class Readiness(Protocol):
    def ready(self) -> None: ...


class Publisher(Protocol):
    async def publish_many(self, envs: Sequence[events_pb2.Envelope]) -> list[int | BusError]: ...


class GangPermitConfig(msgspec.Struct, frozen=True, kw_only=True):
    cluster: str
    gang_timeout_s: float = DEFAULT_TIMEOUT_S  # a gang's deadline, from its first attempt
    scheduler_name: str = SCHEDULER_NAME  # pods naming another scheduler are left alone
    scoring: Scoring = "binpack"
    preemption: bool = True  # evict lower-priority workloads to place an admitted gang
    sync_timeout_s: float = 30.0  # reading the whole cluster at start
    heartbeat_s: float = 2.0  # how often the cluster's room is put in MUSTER_CLUSTERS
    # An unanswered placement `cmd.evict` is sent again after this, then twice as long each
    # time up to RESEND_MAX_S (`muster.gangpermit.evictions`).
    evict_resend_s: float = RESEND_FIRST_S
    ended_kept_s: float = ENDED_KEPT_S  # a late admission of an ended workload: dropped

    def __post_init__(self) -> None:
        if not self.gang_timeout_s > 0:
            raise ValueError(f"gang timeout must be > 0 seconds, got {self.gang_timeout_s:g}")
        if not self.scheduler_name:
            raise ValueError("scheduler name must not be empty")
        # Never infinite: no heartbeat and admission takes the cluster for lost; no re-send
        # and an eviction the binder missed is never asked for again.
        if not HEARTBEAT_FLOOR_S <= self.heartbeat_s < math.inf:
            raise ValueError(
                f"--heartbeat-seconds: the heartbeat interval must be a finite number >= "
                f"{HEARTBEAT_FLOOR_S:g} seconds, got {self.heartbeat_s:g}"
            )
        if not 0 < self.evict_resend_s < math.inf:
            raise ValueError(
                f"--evict-resend-seconds: evict re-send must be a finite number > 0 seconds, "
                f"got {self.evict_resend_s:g}"
            )
        check_ended_kept(self.ended_kept_s)


def followed_subjects(cluster: str, events: Sequence[str] = FOLLOWED_EVENTS) -> list[str]:
    return [
        *(f for e in events for f in workload_filters("*" if e in SPEC_EVENTS else cluster, e)),
        config_subject(cluster, ">"),
    ]


async def run_gangpermit(
    bus: Bus,
    health: Readiness,
    *,
    backend: ClusterBackend,
    config: GangPermitConfig,
    clock_s: Callable[[], float] = time.time,
    warn: Warn | None = None,
) -> None:
    """Permit, time out or preempt for the cluster's gangs, until cancelled; `warn` tells a
    Node it cannot take why, on the Node (a Kubernetes Event)."""
    state = GangPermitState(
        cluster=config.cluster,
        scheduler_name=config.scheduler_name,
        default_timeout_s=config.gang_timeout_s,
        scoring=config.scoring,
        preemption=config.preemption,
        # The bus's limit, or the server's, whichever refuses first: a larger permit goes in parts.
        max_event_bytes=min(bus.config.max_event_bytes, bus.nc.max_payload),
        evict_resend_s=config.evict_resend_s,
        ended_kept_s=config.ended_kept_s,
        creates_on_nodes=backend.creates_on_nodes,
    )
    events = Quarantine(bus.publisher, consumer=f"gangpermit-{config.cluster}")
    last = await bus.last_sequence()
    if last:
        restored = followed_subjects(config.cluster, RESTORED_EVENTS)
        async for env in bus.replay(restored, until_sequence=last):
            await apply_event(state, env, events)
    # Before the cluster is read: a permit acknowledged by then had its pods made (or bound)
    # before, so the cluster read shows those not deleted since.
    state.restored(binder_acked=await binder_acked(bus, config.cluster) if last else 0)
    wake = asyncio.Event()
    beat = asyncio.Event()
    cache = ClusterCache(
        backend,
        sink=state,
        on_change=wake.set,
        quarantine=Quarantine(bus.publisher, consumer=f"gangpermit-{config.cluster}-cluster"),
        warn=warn,
    )

    async def follow() -> None:
        subjects = followed_subjects(config.cluster)
        watched = f"gangpermit-{config.cluster}"
        async for env in bus.replay(subjects, from_sequence=last + 1, follow=True, watched=watched):
            if await apply_event(state, env, events):
                wake.set()

    series = (
        PlacementSeries(bus.metrics.registry, cluster=config.cluster)
        if bus.metrics is not None
        else None
    )
    failures = PassFailures()

    async def passes() -> None:
        pulse = bus.pulses.pulse("gangpermit-passes")
        while True:
            raise_if_cancelling()  # nats-py's waits (and wait_for here) may have swallowed it
            deadline = _next_due_s(state)
            # Never 0: a deadline the pass did not clear must not spin the loop.
            timeout = None if deadline is None else max(_MIN_WAIT_S, deadline - clock_s())
            pulse.beat(None if timeout is None else timeout + BATCH_WINDOW_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)
            if wake.is_set():
                await asyncio.sleep(BATCH_WINDOW_S)
            wake.clear()
            started_ns, started = time.time_ns(), time.perf_counter()
            try:
                envs = decide(state, now_s=clock_s())
            except Exception:  # a bug, or data nothing caught before: the next change retries
                failures.failed()
                continue
            failures.recovered()
            if series is not None:
                series.passed(
                    time.perf_counter() - started,
                    waiting=len(state.waiting),
                    evictions_resent=state.resent_evictions,
                )
            beat.set()  # the room may have changed: tell admission soon
            if envs:
                with pulse.handling():  # each failed try of the publish advances it
                    await _publish_traced(bus, envs, started_ns=started_ns)

    synced = asyncio.Event()
    async with SupervisedGroup() as tasks:
        tasks.create_task(cache.run(), name="gangpermit-cluster-watch")
        # From the start: while the cluster is not read (or not reached), admission is told why.
        beats = heartbeat(bus, state, config, beat, backend=backend, synced=synced)
        tasks.create_task(beats, name="gangpermit-heartbeat")
        await _read_cluster(cache, config)  # the whole cluster, then decide
        synced.set()
        beat.set()
        health.ready()
        tasks.create_task(follow(), name="gangpermit-events")
        tasks.create_task(passes(), name="gangpermit-passes")


def _next_due_s(state: GangPermitState) -> float | None:
    """When a pass must run with no change: a gang's deadline, or an eviction's re-send."""
    due = [state.scheduler.next_deadline_s(), state.evictions.next_due_s()]
    return min((d for d in due if d is not None), default=None)


async def binder_acked(bus: Bus, cluster: str) -> int:
    """The stream sequence up to which the binder of `cluster` handled every admission and
    permit (its consumer's ack floor); 0, each restored permit held until answered, when it
    cannot be read (a NATS user of an installation that has not given gang-permit its look
    at the binder's consumer yet: docs/events.md)."""
    try:
        return await bus.acked_through(binder_durable(cluster))
    except Unavailable as err:
        log.warning("the binder's progress not read (permits restored hold their nodes): %s", err)
        return 0


async def _read_cluster(cache: ClusterCache, config: GangPermitConfig) -> None:
    """Wait until the cache holds the whole cluster, however long it is away (a worker whose
    API server does not answer yet: its heartbeat says why meanwhile)."""
    while True:
        raise_if_cancelling()
        try:
            await cache.sync(timeout_s=config.sync_timeout_s)
        except ClusterError as err:
            log.warning("cluster %s not read yet: %s", config.cluster, err)
            continue
        log.info("cluster %s read up to revision %d", config.cluster, cache.revision)
        return


async def apply_event(
    state: GangPermitState, env: events_pb2.Envelope, quarantine: Quarantine
) -> bool:
    """`state.apply_event(env)`; an event it cannot take is dead-lettered and changes nothing."""
    try:
        return state.apply_event(env)
    except Exception as err:  # poison: the same event fails the same way after a restart too
        await quarantine.event(env, err)
        return False


class PassFailures:
    """Passes that raised: the first of a run is logged with its traceback, the rest counted."""

    def __init__(self) -> None:
        self.count = 0

    def failed(self) -> None:
        self.count += 1
        if self.count == 1:
            log.exception("scheduling pass failed; retrying at the next change")

    def recovered(self) -> None:
        if self.count:
            log.info("scheduling passes work again after %d failures", self.count)
        self.count = 0


async def _publish_traced(
    bus: Bus, envs: Sequence[events_pb2.Envelope], *, started_ns: int
) -> None:
    """Publish a pass's decisions; with spans recorded, in the pass's span and their own."""
    span = start_span("gangpermit.pass", None, start_ns=started_ns)
    spans = trace_decisions(envs, service="gangpermit", start_ns=started_ns)
    try:
        await publish_until_done(bus, envs)
    finally:
        for s in [*spans, *([span] if span is not None else [])]:
            s.end()


async def heartbeat(
    bus: Bus,
    state: GangPermitState,
    config: GangPermitConfig,
    changed: asyncio.Event,
    *,
    backend: ClusterBackend,
    synced: asyncio.Event,
) -> None:
    """Put the cluster's room in MUSTER_CLUSTERS every `heartbeat_s`, and soon after a pass
    (`changed`), until cancelled: it tells admission the cluster is alive and what a
    dispatched workload would find there, or why it is not reachable (`probe`; or not read
    yet: `synced`)."""
    kv = None
    writer = RoomWriter(config.cluster, tombstones_kept_s=FOLLOWED_TOMBSTONES_KEPT_S)
    said = ""  # the heartbeat's size problem last logged
    room = None  # the last heartbeat: its split in parts, and the parts to reuse
    pulse = bus.pulses.pulse("gangpermit-heartbeat")
    while True:
        raise_if_cancelling()  # the waits below may have swallowed it (bus.cancel)
        pulse.beat(config.heartbeat_s)  # the next heartbeat, its room and rest included
        with pulse.handling():  # a probe retrying against the API server advances it
            capacity, spent_s = await _room(state, config, backend=backend, synced=synced.is_set())
        started = time.perf_counter()
        # Over max_payload NATS would refuse the put: the room goes in parts, and only a room
        # too large even for those says why it reports none (ROOM_TOO_LARGE).
        room = encode_room(capacity, max_bytes=bus.nc.max_payload, last=room)
        spent_s += time.perf_counter() - started
        if room.too_large != said:  # once per change, not every heartbeat
            said = room.too_large
            level = logging.ERROR if said else logging.INFO
            log.log(level, "heartbeat: %s", said or "the cluster's room fits again")
        try:
            kv = kv or await bus.kv(CLUSTERS_BUCKET)
            await writer.write(kv, room)
        except (Unavailable, TimeoutError) as exc:
            log.warning("heartbeat not written: %r", exc)
        rest_s = heartbeat_rest_s(spent_s, config)
        with contextlib.suppress(TimeoutError):  # the rest below counts in the period
            await asyncio.wait_for(changed.wait(), max(0.0, config.heartbeat_s - rest_s))
        changed.clear()
        await asyncio.sleep(rest_s)  # one put per burst


def heartbeat_rest_s(spent_s: float, config: GangPermitConfig) -> float:
    """The least rest after a heartbeat whose room took `spent_s` to compute: a burst's
    passes wake it at most every HEARTBEAT_MIN_S (or `heartbeat_s`, if shorter), and a large
    cluster's less often, so that it takes at most 1/HEARTBEAT_CPU_SHARE of the loop, but
    never less often than every `heartbeat_s` (admission takes a silent cluster for lost)."""
    fastest = min(HEARTBEAT_MIN_S, config.heartbeat_s)
    return max(fastest, min(spent_s * HEARTBEAT_CPU_SHARE, config.heartbeat_s))


# Why a cluster does not answer, as Kueue's MultiKueueCluster Active condition words it.
_UNREACHABLE_REASONS = {"Unavailable": "ClientConnectionFailed"}


async def _room(
    state: GangPermitState, config: GangPermitConfig, *, backend: ClusterBackend, synced: bool
) -> tuple[ClusterCapacity, float]:
    """What the heartbeat says: the room, or why there is none to tell; and the seconds
    computing the room took."""
    failure = await backend.probe()
    if failure is not None:
        reason = _UNREACHABLE_REASONS.get(failure.reason, failure.reason)
        unreachable = failure.message
        return ClusterCapacity(cluster=config.cluster, unreachable=unreachable, reason=reason), 0.0
    if not synced:
        message = "its services are still reading it"
        return ClusterCapacity(cluster=config.cluster, unreachable=message, reason="Syncing"), 0.0
    started = time.perf_counter()
    return state.capacity(), time.perf_counter() - started


async def publish_until_done(publisher: Publisher, envs: Sequence[events_pb2.Envelope]) -> None:
    """Publish `envs` together; retry each failure with the same id until JetStream has it.

    The scheduler already holds what they announce (a permit's room), so giving up would leave
    it held with no binder told. An event JetStream refuses for good (`Reject`, oversized) is
    logged and dropped: retrying cannot help.
    """
    left = list(envs)
    for attempt in itertools.count():
        # All in flight together, one workload's in order (`Publisher.publish_many`).
        results = await publisher.publish_many(left)
        failed = []
        for env, result in zip(left, results, strict=True):
            if isinstance(result, Reject):
                log.error("event refused: %s", result, extra={"workload": env.workload})
            elif isinstance(result, BusError):
                failed.append(env)
        if not failed:
            return
        left = failed
        delay = _PUBLISH_RETRY_S[min(attempt, len(_PUBLISH_RETRY_S) - 1)]
        log.warning("publishing %d events failed; retrying in %gs", len(left), delay)
        advanced()  # a failed try is an answer: slow, not stalled (bus/progress.py)
        await asyncio.sleep(delay)
