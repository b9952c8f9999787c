"""Routing in the admission service (docs/routing.md, "In the services"). Pure.

The engine routes; around it, a sharded service needs the alternatives a shard may route
among (`routable`: those in cohort trees it owns), a Routed event when that leaves none
(`stays_event`), and what a workload's events say about where it goes (`WorkloadRoute`, read
by `decisions` for `workload.routed` and for the routed requests in `admitted`'s hints).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from muster.admission.shards import Sharding
from muster.api.model import PodSet, Workload
from muster.contracts.v1 import events_pb2 as pb
from muster.core.engine import Engine
from muster.core.events import Event, EventType
from muster.core.routing import Policy, RoutingSettings
from muster.core.routing.model import REASONS

# A Routed event's reason names the policy that decided ("Fastest"); its payload names both.
POLICY_OF_REASON = {reason: policy.value for policy, reason in REASONS.items()}


@dataclass(frozen=True, slots=True)
class WorkloadRoute:
    """Where a workload with alternatives goes now, as its events say it."""

    queue_name: str  # the LocalQueue it goes through now
    away: bool  # on an alternative, not its declared queue
    pod_sets: tuple[PodSet, ...]  # its podsets there
    run_s: float | None  # its expected run time there, when known
    note: str = ""  # what the Routed message adds: alternatives this shard did not consider


def routable(wl: Workload, sharding: Sharding, *, keep: str = "") -> tuple[Workload, str]:
    """`wl` as this shard routes it, without the alternatives other shards own, and the note
    that says which were left out ("" when none). `keep`: the LocalQueue it was routed to."""
    foreign = sharding.foreign_alternatives(wl, keep=keep)
    if not foreign:
        return wl, ""
    names = {f.queue_name for f in foreign}
    kept = tuple(a for a in wl.alternatives if a.queue_name not in names)
    note = "not considered: " + ", ".join(map(str, foreign))
    return msgspec.structs.replace(wl, alternatives=kept), note


def stays_event(
    engine: Engine, settings: RoutingSettings, wl: Workload, *, now_s: float
) -> Event | None:
    """The Routed event saying pending `wl` stays on its declared queue, when its policy would
    route it but this shard may route it nowhere (the engine, given no alternative, is silent).
    None when its ClusterQueue does not exist or does not route."""
    config = engine.config
    lq = config.local_queues.get(f"{wl.meta.namespace}/{wl.queue_name or 'default'}")
    cq = config.cluster_queues.get(lq.cluster_queue) if lq is not None else None
    policy = settings.policy_of(cq)
    if cq is None or policy is Policy.STATIC:
        return None
    return Event(
        time=now_s,
        type=EventType.ROUTED,
        object=wl.key,
        reason=REASONS[policy],
        message=f"stays in ClusterQueue {cq.meta.name}",
        from_queue=cq.meta.name,
        to_queue=cq.meta.name,
    )


def routed_payload(e: Event, route: WorkloadRoute | None) -> pb.WorkloadRouted:
    """The `workload.routed` payload of the engine's Routed event `e`."""
    note = route.note if route is not None else ""
    return pb.WorkloadRouted(
        from_cluster_queue=e.from_queue,
        to_cluster_queue=e.to_queue,
        queue_name=route.queue_name if route is not None else "",
        policy=POLICY_OF_REASON.get(e.reason, ""),
        reason=e.reason,
        message=f"{e.message}; {note}" if note else e.message,
    )
