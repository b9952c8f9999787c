"""MultiKueue's bookkeeping, one copy for the admission service and `muster simulate`. Pure.

`DispatcherState` holds what dispatch remembers between rounds: the reservations waiting for a
worker (in order of reservation), which worker each workload was sent to (its *target*, and
the worker of its last admission), the room a dispatch holds on a worker until the worker
reports the gang placed, the workers lost, the workloads evicted for a lost worker and the
*fences* that keep them off it until it confirms their pods gone, and the back-off of a worker
that refused a workload. `dispatch_round` tries the waiting workloads against the workers as
the caller sees them now (`ClusterView`: heartbeats in the service, the nodes in the
simulator) with `muster.core.dispatch`, and returns what it decided as data; the admission
service turns that into events (admission/dispatch.py), the simulator into timeline entries
(sim/fleet.py). No I/O and no clock: `now_s` comes in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import msgspec

from muster.api.model import WorkloadKey
from muster.core.dispatch import (
    Candidate,
    ClusterCapacity,
    Demand,
    Dispatched,
    NoClusterFits,
    Route,
    Takes,
    dispatch,
    minus,
)

# A worker that refused to create a workload is passed over for it this long, doubling per
# refusal up to REFUSED_MAX_S (Kueue's MultiKueue: 5 s steps up to about 5 minutes).
REFUSED_S, REFUSED_MAX_S = 5.0, 320.0


@dataclass(slots=True)
class Waiting:
    """A reservation whose MultiKueue checks wait for a worker."""

    checks: tuple[str, ...]
    demand: Demand | None = None  # the service computes it on the first try
    epoch: int = 0  # the simulator's reservation epoch (its answers are dropped once it ends)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """A declared worker as the caller sees it now: its room as reported (None: unknown, taken
    as room enough), or why it takes no work now ("lost", "no heartbeat yet", ...), and the
    namespaces it has (None: not known, not checked)."""

    capacity: ClusterCapacity | None = None
    unavailable: str = ""
    namespaces: AbstractSet[str] | None = None  # the caller's own set: read, never kept


class Try(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A waiting workload to try this round: its route (or why it has none) and demand."""

    key: WorkloadKey
    route: Route | NoClusterFits
    demand: Demand | None = None  # needed only with a route


class Sent(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="Sent"):
    """`key` goes to `cluster`: its `checks` turn Ready with `message`."""

    key: WorkloadKey
    checks: tuple[str, ...]
    cluster: str
    message: str


class Waits(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="Waits"):
    """`key` still waits: its `checks` stay Pending with `message` (why no worker takes it)."""

    key: WorkloadKey
    checks: tuple[str, ...]
    message: str


DispatchDecision = Sent | Waits


@dataclass(slots=True)
class Refusal:
    count: int  # refusals so far
    until_s: float  # passed over until then
    why: str


@dataclass(slots=True)
class DispatcherState:
    """Targets, holds, losses, fences and refusals; see the module docstring."""

    waiting: dict[WorkloadKey, Waiting] = field(default_factory=dict)  # in order of reservation
    targets: dict[WorkloadKey, str] = field(default_factory=dict)  # where its pods may be now
    on: dict[str, set[WorkloadKey]] = field(default_factory=dict)  # the same, by worker
    last: dict[WorkloadKey, str] = field(default_factory=dict)  # worker of its last admission
    holds: dict[WorkloadKey, tuple[str, Takes]] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)  # lost, and what ran there evicted
    lost: dict[WorkloadKey, str] = field(default_factory=dict)  # evicted for it, not stopped
    fenced: dict[WorkloadKey, set[str]] = field(default_factory=dict)
    refusals: dict[tuple[WorkloadKey, str], Refusal] = field(default_factory=dict)

    # --- facts ---------------------------------------------------------------------------

    def wait(self, key: WorkloadKey, waiting: Waiting) -> None:
        self.waiting[key] = waiting

    def target(self, key: WorkloadKey, cluster: str) -> None:
        """`key` was sent to (or admitted in) `cluster`."""
        old = self.targets.get(key)
        if old is not None:
            self.on[old].discard(key)
        self.targets[key] = self.last[key] = cluster
        self.on.setdefault(cluster, set()).add(key)

    def stopped(self, key: WorkloadKey) -> None:
        """Its pods are gone: no target, no hold, no wait; off a lost worker until that one
        agrees (`counts`)."""
        old = self.targets.pop(key, None)
        if old is not None:
            self.on[old].discard(key)
        self.holds.pop(key, None)
        self.waiting.pop(key, None)
        lost = self.lost.pop(key, None)
        if lost is not None:
            self.fenced.setdefault(key, set()).add(lost)

    def forget(self, key: WorkloadKey) -> None:
        """It finished or was deleted: nothing about it is kept."""
        self.stopped(key)
        self.last.pop(key, None)
        self.fenced.pop(key, None)
        for refusal in [r for r in self.refusals if r[0] == key]:
            del self.refusals[refusal]

    def placed(self, keys: Iterable[str], *, cluster: str) -> None:
        """`cluster` reports the gangs of `keys` placed: their room counts there now."""
        placed = set(keys)
        for key, (held_on, _) in list(self.holds.items()):
            if held_on == cluster and key in placed:
                del self.holds[key]

    def refuse(self, key: WorkloadKey, cluster: str, why: str, *, now_s: float) -> None:
        """`cluster` refused to create `key`: pass it over for `key` a while, doubling."""
        before = self.refusals.get((key, cluster))
        count = before.count if before is not None else 0
        delay_s = min(REFUSED_S * 2**count, REFUSED_MAX_S)
        self.refusals[(key, cluster)] = Refusal(count + 1, now_s + delay_s, why)

    def counts(self, key: WorkloadKey, cluster: str, *, stops: bool) -> bool:
        """Whether what `cluster` says about `key`'s pods counts: only from the worker of its
        last admission, never from one it is fenced off; there, its pods stopping (`stops`)
        lifts the fence."""
        fences = self.fenced.get(key)
        if fences is not None and cluster in fences:
            if stops:  # the lost worker carried out the eviction
                fences.discard(cluster)
                if not fences:
                    del self.fenced[key]
            return False
        expected = self.last.get(key)
        return expected is None or expected == cluster

    # --- losses --------------------------------------------------------------------------

    def running(self) -> list[str]:
        """The workers not lost with workloads sent there, in name order."""
        return [c for c in sorted(self.on) if self.on[c] and c not in self.down]

    def lose(self, cluster: str) -> list[WorkloadKey]:
        """`cluster` is lost: the workloads sent there, in key order (to evict)."""
        self.down.add(cluster)
        return sorted(self.on.get(cluster, ()))

    def evicted_for_loss(self, key: WorkloadKey, cluster: str) -> None:
        """`key` was evicted because `cluster` was lost; its pods there are not known gone, so
        it is fenced off `cluster` once it stops."""
        self.lost[key] = cluster

    # --- decisions -----------------------------------------------------------------------

    def dispatch_round(
        self, tries: Sequence[Try], clusters: Mapping[str, ClusterView], *, now_s: float
    ) -> list[DispatchDecision]:
        """Try each of `tries` in order: a workload sent somewhere stops waiting, targets that
        worker and holds the room it is expected to take there, so later tries in the round
        do not count the same room. `clusters` holds the declared workers."""
        rooms: dict[str, ClusterCapacity | None] = {}
        out: list[DispatchDecision] = []
        for attempt in tries:
            key, route = attempt.key, attempt.route
            checks = self.waiting[key].checks
            if isinstance(route, NoClusterFits):
                out.append(Waits(key=key, checks=checks, message=route.message))
                continue
            if attempt.demand is None:
                continue  # the caller could not tell its demand yet: it waits, unchanged
            candidates = [
                self._candidate(key, name, clusters.get(name), rooms, now_s=now_s)
                for name in route.clusters
            ]
            outcome = dispatch(attempt.demand, candidates, strategy=route.strategy)
            if not isinstance(outcome, Dispatched):
                out.append(Waits(key=key, checks=checks, message=outcome.message))
                continue
            del self.waiting[key]
            self.target(key, outcome.cluster)
            if outcome.takes:
                self.holds[key] = (outcome.cluster, outcome.takes)
                room = rooms.get(outcome.cluster)
                if room is not None:
                    rooms[outcome.cluster] = minus(room, [outcome.takes])
            out.append(
                Sent(key=key, checks=checks, cluster=outcome.cluster, message=outcome.message)
            )
        return out

    def _candidate(
        self,
        key: WorkloadKey,
        name: str,
        view: ClusterView | None,
        rooms: dict[str, ClusterCapacity | None],
        *,
        now_s: float,
    ) -> Candidate:
        if view is None:
            return Candidate(cluster=name, unavailable="no MultiKueueCluster")
        if name in self.fenced.get(key, ()):
            return Candidate(cluster=name, unavailable="still stopping it there")
        refusal = self.refusals.get((key, name))
        if refusal is not None and refusal.until_s > now_s:
            return Candidate(cluster=name, unavailable=f"refused it ({refusal.why})")
        if view.unavailable:
            return Candidate(cluster=name, unavailable=view.unavailable)
        namespace = key.partition("/")[0]
        if view.namespaces is not None and namespace not in view.namespaces:
            missing = f"namespace {namespace} does not exist there"
            return Candidate(cluster=name, unavailable=missing)
        if name not in rooms:
            rooms[name] = self.room(name, view.capacity)
        return Candidate(cluster=name, capacity=rooms[name])

    def room(self, cluster: str, capacity: ClusterCapacity | None) -> ClusterCapacity | None:
        """`capacity` less the room held on `cluster` for workloads sent there, not placed."""
        if capacity is None:
            return None
        return minus(capacity, [takes for c, takes in self.holds.values() if c == cluster])
