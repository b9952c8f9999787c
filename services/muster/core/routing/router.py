"""Routing state of one engine: which workloads have options, and which option each is on.

The engine owns the queues and moves workloads; the router reads `EngineState` (`loads`) and
answers with a `Choice`. Routes of workloads that may still move under `fastest` are kept in
arrival order in `open`, so a pass looks at those only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from muster.api.model import WorkloadKey
from muster.core.records import WorkloadRecord
from muster.core.routing import fastest, threshold
from muster.core.routing.loads import candidate, queue_load
from muster.core.routing.model import (
    Candidate,
    Choice,
    Policy,
    QueueLoad,
    RouteOption,
    RoutingSettings,
)
from muster.core.routing.options import options_of

if TYPE_CHECKING:
    from muster.core.state import EngineState


class Route:
    """One workload's options and the one it is on; mutable, owned by the `Router`."""

    __slots__ = ("announced", "current", "options", "policy", "settled")

    def __init__(self, options: tuple[RouteOption, ...], policy: Policy) -> None:
        self.options = options
        self.policy = policy
        self.current = 0  # index into options; 0 is the declared queue
        self.announced = False  # a Routed event was emitted for it
        self.settled = False  # decided for good (threshold, or the workload started)


class Router:
    def __init__(self, settings: RoutingSettings) -> None:
        self.settings = settings
        self.routes: dict[WorkloadKey, Route] = {}
        self.open: dict[WorkloadKey, None] = {}  # fastest routes not settled, arrival order
        self._loads: dict[str, QueueLoad] = {}
        self._loads_version = -1

    def track(self, state: EngineState, r: WorkloadRecord) -> Route | None:
        """Start routing `r` if it has alternatives and its declared ClusterQueue's policy
        is not static; its route, or None."""
        if not r.wl.alternatives:
            return None
        lq = state.config.local_queues.get(r.local_queue)
        cq = state.config.cluster_queues.get(lq.cluster_queue) if lq is not None else None
        policy = self.settings.policy_of(cq)
        if policy is Policy.STATIC:
            return None
        route = self.routes[r.key] = Route(options_of(r.wl), policy)
        if policy is Policy.FASTEST:
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
            load = self._loads[cluster_queue] = queue_load(state, self, cluster_queue)
        return load

    def candidates(self, state: EngineState, r: WorkloadRecord, route: Route) -> list[Candidate]:
        return [candidate(state, self, r, option) for option in route.options]

    def decide(self, state: EngineState, r: WorkloadRecord, route: Route) -> Choice:
        """The option `r` should take now under its policy."""
        found = self.candidates(state, r, route)
        if route.policy is Policy.THRESHOLD:
            return threshold.decide(found[0], found[1:], rule=self.settings.threshold)
        return fastest.decide(
            found,
            current=route.current,
            key=r.key,
            order=r.order_key,
            now_s=state.now_s,
            hysteresis=self.settings.hysteresis,
        )
