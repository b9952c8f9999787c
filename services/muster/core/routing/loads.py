"""Routing's view of the engine: each ClusterQueue's load.

Read-only over `EngineState`'s records, usage and configuration (like `muster.core.visibility`)
and the router's routes; the router calls it before deciding and never changes what it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from muster.api.model import WorkloadKey
from muster.core.records import Phase, WorkloadRecord
from muster.core.routing.model import NEVER, QueueLoad, Route, Running, Waiting
from muster.core.routing.options import declared_run_seconds, demand_of

if TYPE_CHECKING:
    from muster.core.state import EngineState

Routes = Mapping[WorkloadKey, Route]  # the router's: each routed workload's options


def queue_load(state: EngineState, routes: Routes, name: str) -> QueueLoad:
    """ClusterQueue `name` now: quota per resource, who holds it until when, who waits."""
    cq = state.config.cluster_queues[name]
    node = state.config.tree.cluster_queues[name]
    nominal: dict[str, int] = {}
    reserved: dict[str, int] = {}
    for group in cq.resource_groups:
        for flavor in group.flavors:
            for quota in flavor.resources:
                nominal[quota.name] = nominal.get(quota.name, 0) + quota.nominal_quota
                used = node.usage.get((flavor.name, quota.name), 0)
                reserved[quota.name] = reserved.get(quota.name, 0) + used
    # The index's list is in order already (Pending and Backoff; a backing-off one is not
    # waiting to be admitted now).
    waiting = [r for r in state.index.waiting.get(name, ()) if r.phase is Phase.PENDING]
    holders = list(state.usage.holders.get(name, {}).values())
    return QueueLoad(
        name=name,
        nominal=nominal,
        reserved=reserved,
        pending=len(state.index.waiting.get(name, ())),
        reserving=len(holders),
        running=tuple(_running(r, routes, now_s=state.now_s) for r in holders),
        waiting=tuple(
            Waiting(
                key=r.key,
                order=r.order_key,
                native=not is_routed(routes, r.key),
                demand=demand_of(r.wl.pod_sets),
                run_s=run_seconds_of(r, routes),
            )
            for r in waiting
        ),
    )


def _running(r: WorkloadRecord, routes: Routes, *, now_s: float) -> Running:
    usage: dict[str, int] = {}
    for (_, resource), amount in r.usage.items():
        usage[resource] = usage.get(resource, 0) + amount
    if r.phase is Phase.EVICTING:
        return Running(demand=usage, release_at_s=now_s)  # on its way out
    run_s = run_seconds_of(r, routes)
    release_at_s = NEVER if run_s is None else r.reserved_at_s + run_s
    return Running(demand=usage, release_at_s=release_at_s)


def is_routed(routes: Routes, key: WorkloadKey) -> bool:
    """Whether `key` is on an alternative, away from its declared queue."""
    route = routes.get(key)
    return route is not None and route.current != 0


def run_seconds_of(r: WorkloadRecord, routes: Routes) -> float | None:
    """How long `r` is expected to run on the option it is on."""
    route = routes.get(r.key)
    if route is not None:
        return route.options[route.current].run_s
    return declared_run_seconds(r.wl)
