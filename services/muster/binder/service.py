"""The binder service of one cluster: its consumers, shared by every replica, and its spec view.

Durable consumers `binder-<cluster>` (admitted, gang_permitted), `binder-<cluster>-evict`
(cmd.evict) and `binder-<cluster>-apply` (cmd.apply), the last two on the MUSTER_COMMANDS
work queue. Each replica also follows every cluster's submitted/deleted/finished events to know
every workload's spec (`WorkloadSpecs`), and with this cluster's evicted and
eviction_completed, each workload's fence (`Fences`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec

from muster.binder.copies import CopyCluster, collect_copies
from muster.binder.fences import Fences
from muster.binder.handlers import (
    BinderContext,
    WorkloadSpecs,
    follow,
    on_admitted,
    on_apply,
    on_evict,
    on_gang_permitted,
)
from muster.binder.manifests import ManifestStore
from muster.binder.pacing import BindPacer
from muster.bus.buckets import MANIFESTS_BUCKET
from muster.bus.connection import Bus
from muster.bus.errors import Reject
from muster.bus.poison import Quarantine
from muster.bus.subjects import (
    COMMANDS_STREAM,
    binder_durable,
    command_subject,
    workload_filters,
)
from muster.bus.supervision import SupervisedGroup
from muster.cluster.backend import ClusterBackend
from muster.contracts.v1 import events_pb2
from muster.core.submissions import ENDED_KEPT_S, check_ended_kept
from muster.metrics.services import BinderSeries

log = logging.getLogger(__name__)

MANIFESTS_ABOUT = "manifests too large for their admission (docs/events.md)"
CHUNK = 128 * 1024  # bytes per chunk of a kept `submitted` (a few per manifest)


class Readiness(Protocol):
    def ready(self) -> None: ...


class BinderConfig(msgspec.Struct, frozen=True, kw_only=True):
    cluster: str
    max_concurrent_binds: int = 16
    binds_per_second: float = 0.0  # 0: unlimited
    lanes: int = 8  # workloads handled at once
    ended_kept_s: float = ENDED_KEPT_S  # a late decision about an ended workload: refused
    # `bound` for a whole permit whose pods it creates on their nodes; off (--bound-events
    # binds), the pods it stored in the cluster are the only answer (docs/events.md).
    bound_for_created: bool = True

    def __post_init__(self) -> None:
        check_ended_kept(self.ended_kept_s)


def spec_subjects(cluster: str, *, copies: bool = True) -> list[str]:
    """Every cluster's submitted, deleted and finished (a workload may be dispatched here from
    another cluster), and this cluster's evicted and eviction_completed (the fences: a late
    admission is not started, an eviction carried out is not carried out again), and with
    `copies` (collected on Kubernetes) its admitted too: a copy of a workload evicted since its
    last admission here is stale. Without, each admission is read once, by the consumer."""
    return [
        *(f for e in ("submitted", "deleted", "finished") for f in workload_filters("*", e)),
        *(workload_filters(cluster, "admitted") if copies else ()),
        *workload_filters(cluster, "evicted"),
        *workload_filters(cluster, "eviction_completed"),
    ]


async def run_binder(
    bus: Bus,
    health: Readiness,
    *,
    backend: ClusterBackend,
    config: BinderConfig,
    copies: CopyCluster | None = None,
) -> None:
    """Start, bind and stop the cluster's pods as events ask, until cancelled. With `copies`
    (a Kubernetes cluster), stale copies of other clusters' workloads are collected too."""
    specs = WorkloadSpecs(ended_kept_s=config.ended_kept_s)
    fences = Fences(cluster=config.cluster, kept_s=config.ended_kept_s)

    async def recall(sequence: int) -> events_pb2.Envelope | None:
        admitted = workload_filters(config.cluster, "admitted")
        found = [env async for env in bus.replay(admitted, from_sequence=sequence,
                                                 until_sequence=sequence)]  # fmt: skip
        return found[0] if found else None

    ctx = BinderContext(
        cluster=config.cluster,
        backend=backend,
        publisher=bus,
        specs=specs,
        pacer=BindPacer(
            max_concurrent=config.max_concurrent_binds, per_second=config.binds_per_second
        ),
        fences=fences,
        admissions=recall,
        bound_for_created=config.bound_for_created,
        metrics=(
            BinderSeries(bus.metrics.registry, cluster=config.cluster)
            if bus.metrics is not None
            else None
        ),
    )
    poison = Quarantine(bus.publisher, consumer=f"binder-{config.cluster}-specs")
    followed = spec_subjects(config.cluster, copies=copies is not None)
    bucket = MANIFESTS_BUCKET.format(cluster=config.cluster)
    store = ManifestStore(bus.objects(bucket, description=MANIFESTS_ABOUT, chunk_bytes=CHUNK))
    keeping = asyncio.Lock()  # one replica makes its bucket changes in stream order

    wake = asyncio.Event()  # something may have made a copy here stale
    ends = {f"workload.{e}" for e in ("finished", "deleted", "evicted")}

    async def keep_manifests() -> None:
        async with keeping:
            specs.manifests.put_back(await store.make(specs.manifests.take()))

    async def apply(env: events_pb2.Envelope, *, keep: bool = True) -> None:
        if env.sequence and env.sequence <= specs.position:
            return  # applied already (by a sweep's catch-up)
        try:
            follow(env, specs, fences)
        except Exception as err:  # poison: the same event fails the same way after a restart
            await poison.event(env, err)
        if env.type in ends:
            wake.set()
        if keep:
            await keep_manifests()

    catching = asyncio.Lock()  # admissions waiting for one catch-up share it

    async def catch_up(until: int = 0) -> None:
        async with catching:
            end = until or await bus.last_sequence()
            if end > specs.position:
                async for env in bus.replay(
                    followed, from_sequence=specs.position + 1, until_sequence=end
                ):
                    await apply(env)

    async def recover(admitted: events_pb2.Envelope) -> None:
        await catch_up(admitted.sequence)  # its `submitted`, if still stored, came before
        if specs.submission(admitted.workload) is None:
            kept = await store.read(admitted.workload, admitted.submitted_id)
            if kept is not None:
                specs.apply(kept)

    ctx.recover = recover

    # Catch up on specs and fences before taking work, so an admitted event finds its
    # workload, and one evicted or ended since is known to be stale; then keep in
    # MUSTER_MANIFESTS_<c> what the replay says must be there (once per workload).
    specs.manifests.stored(await store.load())
    last = await bus.last_sequence()
    if last:
        async for env in bus.replay(followed, until_sequence=last):
            await apply(env, keep=False)
    await keep_manifests()

    async def follow_specs() -> None:
        async for env in bus.replay(
            followed, from_sequence=last + 1, follow=True, watched="binder-specs"
        ):
            await apply(env)

    handlers: dict[str, Callable[[events_pb2.Envelope, BinderContext], Awaitable[None]]] = {
        "workload.admitted": on_admitted,
        "workload.gang_permitted": on_gang_permitted,
        "cmd.evict": on_evict,
        "cmd.apply": on_apply,
    }

    async def handle(env: events_pb2.Envelope) -> None:
        handler = handlers.get(env.type)
        if handler is None:
            raise Reject(f"the binder does not handle {env.type}")
        await handler(env, ctx)

    health.ready()
    async with SupervisedGroup() as tasks:
        tasks.create_task(follow_specs(), name="binder-specs")
        if copies is not None:
            collector = collect_copies(
                copies,
                specs,
                fences,
                own_cluster=config.cluster,
                catch_up=catch_up,
                wake=wake,
                pulse=bus.pulses.pulse("binder-copies"),
            )
            tasks.create_task(collector, name="binder-copies")
        tasks.create_task(
            bus.consume(
                binder_durable(config.cluster),
                [
                    *workload_filters(config.cluster, "admitted"),
                    *workload_filters(config.cluster, "gang_permitted"),
                ],
                handle,
                lanes=config.lanes,
            ),
            name="binder-events",
        )
        for command in ("evict", "apply"):
            tasks.create_task(
                bus.consume(
                    f"binder-{config.cluster}-{command}",
                    [command_subject(config.cluster, command)],
                    handle,
                    stream=COMMANDS_STREAM,
                    lanes=config.lanes,
                ),
                name=f"binder-{command}",
            )
