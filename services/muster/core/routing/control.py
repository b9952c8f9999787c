"""The engine's side of routing: when to decide, what each decision asks of the engine, and
which routed groups wait while a ClusterQueue's own workloads are pending there.

`Engine` owns one `RoutingControl` when routing is on. The control reads `EngineState`, as
`loads` does, and answers with `Take`s and groups to retry; the engine's lifecycle and
queueing move records and queues themselves (routing never calls back into the engine).
docs/routing.md explains the policies and why a queue's own workloads go first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import msgspec

from muster.api.model import WorkloadKey
from muster.api.wellknown import REQUESTS_REFUSED
from muster.core.queues import Park, PendingGroup
from muster.core.records import Phase, WorkloadRecord
from muster.core.routing.model import REASONS, Choice, Route, RouteOption, RoutingSettings
from muster.core.routing.policies import rule_of
from muster.core.routing.router import Router

if TYPE_CHECKING:
    from muster.core.state import EngineState


class Take(msgspec.Struct, frozen=True, kw_only=True):
    """A workload takes `option`, and a Routed event with `reason` and `message` says so.

    `moves`: it leaves the queue it is on; False when the decision keeps it there.
    """

    option: RouteOption
    moves: bool
    reason: str  # the policy that decided (REASONS)
    message: str


class RoutingControl:
    """Routing state of one engine beyond the `Router`'s routes: whether `fastest` should look
    again, and the routed groups held in each ClusterQueue."""

    def __init__(self, settings: RoutingSettings) -> None:
        self.router = Router(settings)
        # Groups of workloads routed into a ClusterQueue, parked while its own workloads wait.
        self.held: dict[str, list[PendingGroup]] = {}
        self.reroute_due = False  # a workload arrived for `fastest` to look at
        self._seen = 0  # `EngineState.emitted` when `fastest` last looked: any event since
        # (something happened) is a reason to look again

    # --- the engine reports --------------------------------------------------------------

    def drop_held(self) -> None:
        """Forget every held group: the engine is enqueuing every pending workload again."""
        self.held = {}

    def settle(self, key: WorkloadKey) -> None:
        """`key` reserved quota once: its route is final."""
        self.router.settle(key)

    def forget(self, key: WorkloadKey) -> None:
        self.router.forget(key)

    def is_routed(self, key: WorkloadKey) -> bool:
        """Whether `key` is on an alternative, away from its declared queue."""
        return self.router.is_routed(key)

    # --- decisions -----------------------------------------------------------------------

    def arrive(self, state: EngineState, r: WorkloadRecord) -> Take | None:
        """Start routing `r` if it has alternatives. `threshold` decides here, once: what `r`
        takes, or None when it has no route yet or its policy decides later."""
        route = self.router.track(state, r)
        if route is None:
            return None
        self.reroute_due = True  # a workload for `fastest` to look at
        rule = rule_of(route.policy)
        if rule is None or not rule.once:
            return None
        take = _take(route, self.router.decide(state, r, route))
        self.router.settle(r.key)
        return take

    def reroute(self, state: EngineState) -> Iterator[tuple[WorkloadRecord, Take]]:
        """`fastest`: what each pending workload it routes takes, after any change; only the
        moves and the decisions not yet announced.

        Lazy on purpose: the engine carries out each take before the next workload is decided,
        so every decision sees the queues as the moves before it left them.
        """
        if not self.reroute_due and state.emitted == self._seen:
            return
        router = self.router
        for key in list(router.open):
            r = state.records[key]
            if r.phase is not Phase.PENDING:
                continue
            route = router.routes[key]
            choice = router.decide(state, r, route)
            if choice.index == route.current and route.announced:
                continue
            yield r, _take(route, choice)
        self.reroute_due = False  # its own Routed events are no reason to look again
        self._seen = state.emitted

    def restore(self, key: WorkloadKey, *, queue_name: str) -> Take | None:
        """The recorded routing of `key` to LocalQueue `queue_name` (state rebuild): the take
        that moves it there, or None when it is there already or has no such option."""
        route = self.router.routes.get(key)
        if route is None:
            return None
        index = next((o.index for o in route.options if o.queue_name == queue_name), None)
        if index is None:
            return None
        route.announced = True  # recorded: a "stays" is not announced again either
        if index == route.current:
            return None
        return _take(route, Choice(index=index, message=""))

    def refuse(self, key: WorkloadKey, *, message: str) -> Take | None:
        """The cluster refused `key`'s requests on the alternative it is on: the take that
        puts it back on its declared queue for good, or None when it is not on one."""
        route = self.router.routes.get(key)
        if route is None or route.current == 0:
            return None
        route.current = 0
        self.router.settle(key)
        return Take(option=route.options[0], moves=True, reason=REQUESTS_REFUSED, message=message)

    # --- a queue's own workloads first ---------------------------------------------------

    def hold_back(self, state: EngineState, r: WorkloadRecord, group: PendingGroup) -> str | None:
        """Hold `group` if `r` was routed into its ClusterQueue while workloads of that queue's
        own wait there: they go first, so routing never takes capacity they are waiting for.

        The message the engine parks the group with, or None when `r` may be tried now.
        """
        if not self.router.is_routed(r.key) or not self._natives_waiting(state, r.cluster_queue):
            return None
        self.held.setdefault(r.cluster_queue, []).append(group)
        return (
            f"routed to ClusterQueue {r.cluster_queue}: waits while workloads of its own "
            "are pending there"
        )

    def release(
        self, state: EngineState, cluster_queue: str | None = None
    ) -> Iterator[PendingGroup]:
        """The held groups to retry in `cluster_queue` (every one when None) once none of its
        own wait there.

        Lazy on purpose: the engine lists each group before the next is looked at, so a group
        held twice is retried once.
        """
        names = list(self.held) if cluster_queue is None else [cluster_queue]
        for name in names:
            if name not in self.held or self._natives_waiting(state, name):
                continue
            for group in self.held.pop(name):
                # An empty one too: retried, it is active again, so the next workload routed
                # into it is listed (left parked, that one waited for good: nothing else
                # wakes a group parked with no shortage).
                if group.park is Park.PARKED:
                    yield group

    def started(self, state: EngineState, r: WorkloadRecord) -> Iterator[PendingGroup]:
        """`r` reserved quota: its route is final. The held groups to retry: a queue's own
        workload starting may release the routed ones held behind it."""
        self.router.settle(r.key)  # now, not when the groups are iterated
        if r.cluster_queue in self.held and not self.router.is_routed(r.key):
            return self.release(state, r.cluster_queue)
        return iter(())

    def _natives_waiting(self, state: EngineState, cluster_queue: str) -> bool:
        return any(
            other.phase is Phase.PENDING and not self.router.is_routed(other.key)
            for other in state.index.waiting.get(cluster_queue, ())
        )


def _take(route: Route, choice: Choice) -> Take:
    """Put `route` on option `choice.index`, marked announced; what the engine then does."""
    moves = choice.index != route.current
    route.current = choice.index
    route.announced = True
    return Take(
        option=route.options[choice.index],
        moves=moves,
        reason=REASONS[route.policy],
        message=choice.message,
    )
