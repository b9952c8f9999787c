"""The `fastest` policy: the option with the earliest expected completion, with hysteresis.

Expected completion in a ClusterQueue comes from list scheduling its quota (flavors pooled per
resource): the workloads holding quota give it back when their expected run ends; then the
pending workloads ahead of this one start in admission order, each as soon as the quota it
needs is free and not before the one ahead of it; then this one. A workload routed into a
queue waits behind every workload of that queue's own (they go first, see the engine), so all
of those count as ahead of it there. docs/routing.md explains the model and its limits.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from muster.api.model import WorkloadKey
from muster.core.routing.model import (
    NEVER,
    Ask,
    Candidate,
    Choice,
    Demand,
    Hysteresis,
    OrderKey,
    QueueLoad,
    RoutingSettings,
    Waiting,
)


def expected_completion(
    candidate: Candidate, *, key: WorkloadKey, order: OrderKey, now_s: float
) -> float:
    """When the workload `key` would finish if it took `candidate`; NEVER if it would not.

    An unknown run time counts as 0 for the workload itself (the options then compare by
    start) and as never ending for the others.
    """
    load = candidate.load
    if load is None:
        return NEVER
    ahead = ahead_of(load, key=key, order=order, native=candidate.native)
    start = expected_start(load, candidate.option.demand, ahead, now_s=now_s)
    return start + (candidate.option.run_s or 0.0)


def ahead_of(load: QueueLoad, *, key: WorkloadKey, order: OrderKey, native: bool) -> list[Waiting]:
    """The pending workloads that would start before `key` in this ClusterQueue.

    The queue's own workloads come first: ahead of one of them are the queue's own before it;
    ahead of a workload routed here are all of the queue's own and the routed ones before it.
    """
    if native:
        return [w for w in load.waiting if w.key != key and w.native and w.order < order]
    return [w for w in load.waiting if w.key != key and (w.native or w.order < order)]


def expected_start(
    load: QueueLoad, demand: Demand, ahead: Iterable[Waiting], *, now_s: float
) -> float:
    """List-schedule `ahead`, then a workload taking `demand`: its start, or NEVER."""
    if not _fits(demand, load.nominal):
        return NEVER
    free = {resource: load.available(resource) for resource in load.nominal}
    releases = [(max(r.release_at_s, now_s), i, r.demand) for i, r in enumerate(load.running)]
    heapq.heapify(releases)
    serial = len(releases)
    t = now_s
    for waiting in ahead:
        if not _fits(waiting.demand, load.nominal):
            continue  # can never be admitted here: others pass it
        t = _when_free(waiting.demand, free, releases, t)
        if t == NEVER:
            return NEVER
        _take(free, waiting.demand)
        end = NEVER if waiting.run_s is None else t + waiting.run_s
        serial += 1
        heapq.heappush(releases, (end, serial, waiting.demand))
    return _when_free(demand, free, releases, t)


def _when_free(
    demand: Demand, free: dict[str, int], releases: list[tuple[float, int, Demand]], t: float
) -> float:
    """The first time >= t at which `demand` fits in `free`, releasing quota as time passes."""
    while not _fits(demand, free):
        if not releases or releases[0][0] == NEVER:
            return NEVER
        at, _, released = heapq.heappop(releases)
        t = max(t, at)
        for resource, amount in released.items():
            if resource in free:
                free[resource] += amount
    return t


def _fits(demand: Demand, room: Demand) -> bool:
    return all(room.get(resource, 0) >= amount for resource, amount in demand.items())


def _take(free: dict[str, int], demand: Demand) -> None:
    for resource, amount in demand.items():
        free[resource] -= amount


def rule(candidates: Sequence[Candidate], ask: Ask, settings: RoutingSettings) -> Choice:
    """The policy's entry in the registry (`policies.RULES`)."""
    return decide(
        candidates,
        current=ask.current,
        key=ask.key,
        order=ask.order,
        now_s=ask.now_s,
        hysteresis=settings.hysteresis,
    )


def decide(
    candidates: Sequence[Candidate],
    *,
    current: int,
    key: WorkloadKey,
    order: OrderKey,
    now_s: float,
    hysteresis: Hysteresis,
) -> Choice:
    """Stay with option `current` unless another is expected to finish sooner by the margin.

    Among the options that beat the margin, the earliest wins; ties go to the preferred one.
    """
    expected = [expected_completion(c, key=key, order=order, now_s=now_s) for c in candidates]
    at = {c.option.index: i for i, c in enumerate(candidates)}[current]
    best = min(range(len(candidates)), key=lambda i: (expected[i], i))
    margin = hysteresis.margin(expected[at], now_s=now_s)
    moves = best != at and expected[best] + margin < expected[at]
    chosen = candidates[best if moves else at]
    summary = ", ".join(
        _expected_text(c, e, now_s=now_s) for c, e in zip(candidates, expected, strict=True)
    )
    here = candidates[at].cluster_queue or candidates[at].option.queue_name
    if moves:
        message = (
            f"routed from ClusterQueue {here} to {chosen.cluster_queue} "
            f"(LocalQueue {chosen.option.queue_name}): expected to complete {summary}"
        )
    else:
        message = f"stays in ClusterQueue {here}: expected to complete {summary}"
    return Choice(index=chosen.option.index, message=message)


def _expected_text(candidate: Candidate, expected_s: float, *, now_s: float) -> str:
    """ "gpu in 26 s": relative to now, which reads the same on the virtual clock and in the
    services (whose clock is Unix time)."""
    name = candidate.cluster_queue or f"LocalQueue {candidate.option.queue_name}"
    if candidate.load is None:
        return f"{name} never ({candidate.problem})"
    return f"{name} {'never' if expected_s == NEVER else f'in {_seconds(expected_s - now_s)} s'}"


def _seconds(value: float) -> str:
    text = f"{value:.1f}"
    return text.removesuffix(".0")
