"""Routing state of one engine: which workloads have options, and which option each is on.

The engine owns the queues and moves workloads; the router reads `EngineState` (`loads`) and
answers with a `Choice` from the rule its policy has in the registry (`policies`). Routes of
workloads that may still move (a policy that decides again while they are pending) are kept
in arrival order in `open`, so a pass looks at those only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from muster.api.model import WorkloadKey
from muster.core.records import WorkloadRecord
from muster.core.routing.loads import queue_load
from muster.core.routing.model import (
    Ask,
    Candidate,
    Choice,
    QueueLoad,
    Route,
    RouteOption,
    RoutingSettings,
)
from muster.core.routing.options import options_of
from muster.core.routing.policies import rule_of

if TYPE_CHECKING:
    from muster.core.state import EngineState

__all__ = ["Route", "Router"]


class Router:
    def __init__(self, settings: RoutingSettings) -> None:
        self.settings = settings
        self.routes: dict[WorkloadKey, Route] = {}
        self.open: dict[WorkloadKey, None] = {}  # routes decided again while pending
        self._loads: dict[str, QueueLoad] = {}
        self._loads_version = -1

    def track(self, state: EngineState, r: WorkloadRecord) -> Route | None:
        """Start routing `r` if it has alternatives and its declared ClusterQueue's policy
        routes; its route, or None."""
        if not r.wl.alternatives:
            return None
        lq = state.config.local_queues.get(r.local_queue)
        cq = state.config.cluster_queues.get(lq.cluster_queue) if lq is not None else None
        policy = self.settings.policy_of(cq)
        rule = rule_of(policy)
        if rule is None:
            return None
        route = self.routes[r.key] = Route(options_of(r.wl), policy)
        if not rule.once:
            self.open[r.key] = None
        return route

    def settle(self, key: WorkloadKey) -> None:
        """`key` must not move any more (it started, or its policy decides only once)."""
        route = self.routes.get(key)
        if route is not None:
            route.settled = True
        self.open.pop(key, None)

    def forget(self, key: WorkloadKey) -> None:
        self.routes.pop(key, None)
        self.open.pop(key, None)

    def is_routed(self, key: WorkloadKey) -> bool:
        """Whether `key` is on an alternative, away from its declared queue."""
        route = self.routes.get(key)
        return route is not None and route.current != 0

    def load(self, state: EngineState, cluster_queue: str) -> QueueLoad:
        """The ClusterQueue's load, computed once per engine state version."""
        if self._loads_version != state.version:
            self._loads = {}
            self._loads_version = state.version
        load = self._loads.get(cluster_queue)
        if load is None:
            load = self._loads[cluster_queue] = queue_load(state, self.routes, cluster_queue)
        return load

    def candidates(self, state: EngineState, r: WorkloadRecord, route: Route) -> list[Candidate]:
        return [self._candidate(state, r, option) for option in route.options]

    def decide(self, state: EngineState, r: WorkloadRecord, route: Route) -> Choice:
        """The option `r` should take now under its policy's rule."""
        rule = rule_of(route.policy)
        assert rule is not None, route.policy  # a route exists only for a policy that routes
        found = self.candidates(state, r, route)
        ask = Ask(key=r.key, order=r.order_key, current=route.current, now_s=state.now_s)
        return rule.decide(found, ask, self.settings)

    def _candidate(self, state: EngineState, r: WorkloadRecord, option: RouteOption) -> Candidate:
        """Where `option` leads `r`, with that ClusterQueue's load, or why it cannot be used."""
        config = state.config
        probe = WorkloadRecord(
            msgspec.structs.replace(r.wl, queue_name=option.queue_name, pod_sets=option.pod_sets),
            seq=r.seq,
            priority=r.priority,
            now_s=r.queue_ts,
        )
        cq, problem = config.resolve_queue(probe)
        if problem is not None or cq is None:
            return Candidate(
                option=option, cluster_queue=cq or "", load=None, problem=problem or ""
            )
        probe.cluster_queue = cq
        inadmissible = config.admissibility(probe)
        if inadmissible is not None:
            return Candidate(option=option, cluster_queue=cq, load=None, problem=inadmissible[1])
        return Candidate(option=option, cluster_queue=cq, load=self.load(state, cq))
