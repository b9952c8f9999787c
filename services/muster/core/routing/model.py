"""What routing decides on and what it decides: policies, settings, options, queue loads, choices,
and each routed workload's `Route`.

A workload with alternatives (`Workload.alternatives`) has options: index 0 is its declared
queue, index i its i-th alternative. A `QueueLoad` is a frozen picture of one ClusterQueue as
routing sees it; a `Choice` says which option the workload should take, and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum

import msgspec

from muster.api.model import ClusterQueue, PodSet, WorkloadKey
from muster.api.wellknown import ROUTING_POLICIES, ROUTING_POLICY_ANNOTATION

Demand = Mapping[str, int]  # resource -> MilliUnits for the whole workload, flavors pooled
OrderKey = tuple[int, float, int]  # (-priority, queue timestamp, arrival sequence)
NEVER = math.inf  # an expected time that never comes


class Policy(StrEnum):
    STATIC = "static"  # always the declared queue (Kueue's behaviour)
    THRESHOLD = "threshold"  # the published gateway's rule, once at submission
    FASTEST = "fastest"  # earliest expected completion, re-evaluated while pending


POLICIES: tuple[str, ...] = tuple(p.value for p in Policy)
# The decoder checks annotations against the names in api.wellknown: the two lists are one.
assert POLICIES == ROUTING_POLICIES, (POLICIES, ROUTING_POLICIES)
# The `reason` of a Routed event: which policy decided.
REASONS: Mapping[Policy, str] = {
    Policy.STATIC: "Static",
    Policy.THRESHOLD: "Threshold",
    Policy.FASTEST: "Fastest",
}


class ThresholdRule(msgspec.Struct, frozen=True, kw_only=True):
    """The counts of the threshold rule (docs/routing.md), as the study's gateway set them."""

    min_pending: int = 10  # (b) the declared ClusterQueue has at least this many pending
    max_reserving: int = 3  # (d) the alternative's ClusterQueue has fewer reserving than this


class Hysteresis(msgspec.Struct, frozen=True, kw_only=True):
    """How much sooner an option must be expected to finish before `fastest` moves a workload:
    the larger of `margin_s` and `margin_fraction` of its expected time left where it is."""

    margin_s: float = 1.0
    margin_fraction: float = 0.1

    def margin(self, current_s: float, *, now_s: float) -> float:
        if current_s == NEVER:
            return 0.0
        return max(self.margin_s, self.margin_fraction * (current_s - now_s))


class RoutingSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Routing for one engine: the policy of ClusterQueues that name none, and the tunables."""

    default_policy: Policy = Policy.STATIC
    threshold: ThresholdRule = msgspec.field(default_factory=ThresholdRule)
    hysteresis: Hysteresis = msgspec.field(default_factory=Hysteresis)

    def policy_of(self, cq: ClusterQueue | None) -> Policy:
        """The ClusterQueue's `muster.dev/routing-policy`, else the default.

        The decoder refuses a value that names no policy; here it falls back to the default.
        """
        text = cq.meta.annotations.get(ROUTING_POLICY_ANNOTATION) if cq is not None else None
        return Policy(text) if text in POLICIES else self.default_policy


class RouteOption(msgspec.Struct, frozen=True, kw_only=True):
    """One way to run a workload: through LocalQueue `queue_name`, with these podsets."""

    index: int  # 0: the declared queue; i: alternatives[i - 1]
    queue_name: str
    pod_sets: tuple[PodSet, ...]
    demand: Demand
    run_s: float | None  # expected run time; None: unknown


class Running(msgspec.Struct, frozen=True, kw_only=True):
    """A workload holding quota: what it holds and when it is expected to give it back."""

    demand: Demand
    release_at_s: float  # NEVER when its run time is unknown


class Waiting(msgspec.Struct, frozen=True, kw_only=True):
    """A pending workload of a ClusterQueue, in admission order."""

    key: WorkloadKey
    order: OrderKey
    native: bool  # in its declared queue (not routed here)
    demand: Demand
    run_s: float | None


class QueueLoad(msgspec.Struct, frozen=True, kw_only=True):
    """One ClusterQueue as routing sees it; amounts per resource with flavors pooled."""

    name: str
    nominal: Demand
    reserved: Demand
    pending: int  # waiting workloads (Kueue's pendingWorkloads)
    reserving: int  # workloads holding quota (Kueue's reservingWorkloads)
    running: tuple[Running, ...]
    waiting: tuple[Waiting, ...]  # in admission order

    def available(self, resource: str) -> int:
        """Nominal quota minus what is reserved (the study's "available"), may be negative."""
        return self.nominal.get(resource, 0) - self.reserved.get(resource, 0)


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """An option of one workload with the ClusterQueue it leads to, or why it cannot be used."""

    option: RouteOption
    cluster_queue: str  # "" when the LocalQueue does not resolve
    load: QueueLoad | None  # None when unusable
    problem: str = ""  # why the option cannot be used now; "" when it can

    @property
    def native(self) -> bool:
        """Whether this is the declared queue: there, the workload is one of the queue's own."""
        return self.option.index == 0


class Choice(msgspec.Struct, frozen=True, kw_only=True):
    """Which option to take, and the user's message saying why."""

    index: int
    message: str


class Ask(msgspec.Struct, frozen=True, kw_only=True):
    """What a policy's rule is asked: where workload `key` (queue order `order`) should run,
    being on option `current` at `now_s`."""

    key: WorkloadKey
    order: OrderKey
    current: int
    now_s: float


class Route:
    """One workload's options and the one it is on; mutable, owned by the `Router`."""

    __slots__ = ("announced", "current", "options", "policy", "settled")

    def __init__(self, options: tuple[RouteOption, ...], policy: Policy) -> None:
        self.options = options
        self.policy = policy
        self.current = 0  # index into options; 0 is the declared queue
        self.announced = False  # a Routed event was emitted for it
        self.settled = False  # decided for good (threshold, or the workload started)
