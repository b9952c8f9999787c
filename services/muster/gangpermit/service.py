"""The gangpermit service of one cluster: follows the cluster's workload events, places gangs.

State is rebuilt at start by replaying the cluster's events (its own permits included), so a
restarted gangpermit neither permits a gang twice nor forgets a reservation. A pass over the
waiting gangs runs when an event may have freed room or completed a gang, and every
`retry_interval_s` (a new node needs no event to help).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import msgspec

from muster.bus.connection import Bus
from muster.bus.errors import Retry
from muster.bus.subjects import workload_subject
from muster.cluster.backend import ClusterBackend
from muster.cluster.errors import ClusterError
from muster.cluster.objects import PodView
from muster.cluster.sim.backend import SimBackend
from muster.core.gang import NodeCapacity, PodKey
from muster.gangpermit.cache import ClusterCache
from muster.gangpermit.handlers import publish_decisions
from muster.gangpermit.snapshot import index_pods, node_capacities
from muster.gangpermit.state import GangState

log = logging.getLogger(__name__)

FOLLOWED_EVENTS = (
    "submitted",
    "admitted",
    "pods_pending",
    "gang_permitted",
    "gang_rejected",
    "bound",
    "finished",
    "eviction_completed",
    "deleted",
)


class Readiness(Protocol):
    def ready(self) -> None: ...


class GangPermitConfig(msgspec.Struct, frozen=True, kw_only=True):
    cluster: str
    gang_timeout_s: float = 300.0  # from admission, for the whole gang
    retry_interval_s: float = 1.0

    def __post_init__(self) -> None:
        if self.gang_timeout_s <= 0 or self.retry_interval_s <= 0:
            raise ValueError("gang timeout and retry interval must be > 0 seconds")


async def run_gangpermit(
    bus: Bus,
    health: Readiness,
    *,
    backend: ClusterBackend,
    config: GangPermitConfig,
    clock_ns: Callable[[], int] = time.time_ns,
) -> None:
    """Permit or time out the cluster's gangs, until cancelled."""
    state = GangState()
    subjects = [workload_subject(config.cluster, e) for e in FOLLOWED_EVENTS]
    last = await bus.last_sequence()
    if last:
        async for env in bus.replay(subjects, until_sequence=last):
            state.apply(env)
    wake = asyncio.Event()
    wake.set()

    async def follow() -> None:
        async for env in bus.replay(subjects, from_sequence=last + 1, follow=True):
            if state.apply(env):
                wake.set()

    cache = None
    if isinstance(backend, SimBackend):  # a watched view: one request per pass, not one per pod
        cache = ClusterCache(backend.store, on_change=wake.set)

    async def passes() -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), config.retry_interval_s)
            wake.clear()
            if state.in_order():
                await _one_pass(bus, backend, cache, state, config, now_ns=clock_ns())

    health.ready()
    async with asyncio.TaskGroup() as tasks:
        if cache is not None:
            tasks.create_task(cache.run(), name="gangpermit-cluster-watch")
        tasks.create_task(follow(), name="gangpermit-events")
        tasks.create_task(passes(), name="gangpermit-passes")


async def _snapshot(
    backend: ClusterBackend, cache: ClusterCache | None
) -> tuple[tuple[NodeCapacity, ...], Mapping[PodKey, PodView]]:
    """Every node with what its bound pods use, and every pod: from the cache once it has read
    every write made so far, else by listing the cluster."""
    if cache is not None:
        await cache.sync()
        return cache.capacities(), cache.pods
    nodes, pods = await backend.list_nodes(), await backend.list_pods()
    return node_capacities(nodes, pods), index_pods(pods)


async def _one_pass(
    bus: Bus,
    backend: ClusterBackend,
    cache: ClusterCache | None,
    state: GangState,
    config: GangPermitConfig,
    *,
    now_ns: int,
) -> None:
    """Look at the cluster, decide on every waiting gang, publish; failures wait for the next."""
    try:
        capacities, index = await _snapshot(backend, cache)
        decisions = state.decide(
            capacities,
            index,
            now_ns=now_ns,
            timeout_ns=int(config.gang_timeout_s * 1e9),
        )
        await publish_decisions(decisions, state, index, publisher=bus, cluster=config.cluster)
    except (ClusterError, Retry) as err:
        log.warning("gang pass failed, trying again: %s", err)
